/* libpagedattn version. meson.build reads the three numbers below; keep their form. */
#ifndef PAGEDATTN_VERSION_H
#define PAGEDATTN_VERSION_H

#define PA_VERSION_MAJOR 0
#define PA_VERSION_MINOR 1
#define PA_VERSION_PATCH 0

#define PA_VERSION_INT(major, minor, patch) (((major) << 16) | ((minor) << 8) | (patch))
#define PA_VERSION PA_VERSION_INT(PA_VERSION_MAJOR, PA_VERSION_MINOR, PA_VERSION_PATCH)

#endif /* PAGEDATTN_VERSION_H */
