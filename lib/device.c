/* Device capabilities, read once per device and cached (plans are created per step). */
#include <pthread.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "internal.h"

enum { MAX_CACHED_DEVICES = 64 };

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static pa_device_caps cache[MAX_CACHED_DEVICES];
static int cached[MAX_CACHED_DEVICES];

static pa_status query(int32_t device, pa_device_caps *caps) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return pa__fail(PA_ERROR_NO_DEVICE, "device: no CUDA device is present");
  }
  if (device < 0 || device >= count)
    return pa__fail(PA_ERROR_NO_DEVICE, "device: expected an ordinal in [0, %d), got %d", count,
                    device);
  int major = 0, minor = 0, sms = 0, smem = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
    return pa__fail(PA_ERROR_CUDA, "device %d: %s", device, cudaGetErrorString(cudaGetLastError()));
  memset(caps, 0, sizeof *caps);
  caps->struct_size = sizeof *caps;
  caps->compute_capability_major = major;
  caps->compute_capability_minor = minor;
  caps->multiprocessor_count = sms;
  caps->max_shared_memory_per_block_optin = smem;
  return PA_SUCCESS;
}

pa_status pa__device_caps_cached(int32_t device, pa_device_caps *caps) {
  if (device == PA_DEVICE_CURRENT) {
    int current = 0;
    if (cudaGetDevice(&current) != cudaSuccess) {
      cudaGetLastError();
      return pa__fail(PA_ERROR_NO_DEVICE, "device: no CUDA device is present");
    }
    device = current;
  }
  if (device >= 0 && device < MAX_CACHED_DEVICES) {
    pthread_mutex_lock(&cache_lock);
    int hit = cached[device];
    if (hit) *caps = cache[device];
    pthread_mutex_unlock(&cache_lock);
    if (hit) return PA_SUCCESS;
  }
  pa_status st = query(device, caps);
  if (st == PA_SUCCESS && device >= 0 && device < MAX_CACHED_DEVICES) {
    pthread_mutex_lock(&cache_lock);
    cache[device] = *caps;
    cached[device] = 1;
    pthread_mutex_unlock(&cache_lock);
  }
  return st;
}

pa_status pa_device_caps_query(int32_t device, pa_device_caps *caps) {
  pa__clear_error();
  if (!caps) return pa__fail(PA_ERROR_INVALID_ARGUMENT, "caps: must not be NULL");
  return pa__device_caps_cached(device, caps);
}
