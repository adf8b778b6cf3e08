"""Which libpagedattn.so the binding loads (doc/python.md): PAGEDATTN_LIBRARY, else the library
installed with the package, else build/ of the source checkout; never another build folder.
Each case copies the package into a temporary layout and imports it in a fresh interpreter.
Usage: test_library_loading.py (PAGEDATTN_LIBRARY names the library built by meson)."""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

BUILT = os.environ["PAGEDATTN_LIBRARY"]
PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "python" / "pagedattn"


def load(python_path, library=None):
    """(returncode, stdout + stderr) of importing pagedattn from python_path and printing
    library_path()."""
    env = {k: v for k, v in os.environ.items() if k not in ("PAGEDATTN_LIBRARY", "PYTHONPATH")}
    env["PYTHONPATH"] = str(python_path)
    if library is not None:
        env["PAGEDATTN_LIBRARY"] = str(library)
    run = subprocess.run([sys.executable, "-c", "import pagedattn; print(pagedattn.library_path())"],
                         env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
    return run.returncode, (run.stdout + run.stderr).strip()


class LibraryLoading(unittest.TestCase):
    def setUp(self):
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="pagedattn-loading-"))

    def tearDown(self):
        shutil.rmtree(self.root)

    def package_copy(self, parent, config=None):
        """The package's sources under parent/pagedattn; config: the LIBDIR of an installed
        _config.py (None: none, as in a source checkout)."""
        target = parent / "pagedattn"
        shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("__pycache__", "*.in"))
        if config is not None:
            (target / "_config.py").write_text("LIBDIR = %r\n" % config)
        return target

    def checkout(self):
        """A source checkout: python/pagedattn, build/libpagedattn.so, and a newer second build
        folder whose library cannot load (an ASan build that must not be picked)."""
        self.package_copy(self.root / "python")
        for folder in ("build", "build-asan"):
            (self.root / folder).mkdir()
        os.symlink(BUILT, self.root / "build" / "libpagedattn.so")
        (self.root / "build-asan" / "libpagedattn.so").write_text("not a library")
        return self.root / "python"

    def test_source_checkout_loads_build_only(self):
        code, out = load(self.checkout())
        self.assertEqual(code, 0, out)
        self.assertEqual(out, str(self.root / "build" / "libpagedattn.so"))

    def test_explicit_library_wins(self):
        python = self.checkout()
        other = self.root / "elsewhere" / "libpagedattn.so"
        other.parent.mkdir()
        os.symlink(BUILT, other)
        code, out = load(python, other)
        self.assertEqual((code, out), (0, str(other)))

    def test_explicit_library_that_does_not_load_is_an_error_not_a_fallback(self):
        code, out = load(self.checkout(), self.root / "build-asan" / "libpagedattn.so")
        self.assertNotEqual(code, 0, out)
        self.assertIn("cannot load %s" % (self.root / "build-asan" / "libpagedattn.so"), out)

    def test_library_inside_the_package_wins_over_build(self):
        python = self.checkout()
        os.symlink(BUILT, python / "pagedattn" / "libpagedattn.so")
        code, out = load(python)
        self.assertEqual((code, out), (0, str(python / "pagedattn" / "libpagedattn.so")))

    def test_meson_install_loads_the_recorded_libdir(self):
        libdir = self.root / "prefix" / "lib"
        libdir.mkdir(parents=True)
        os.symlink(BUILT, libdir / "libpagedattn.so.0")
        site = self.root / "prefix" / "site-packages"
        self.package_copy(site, config=str(libdir))
        code, out = load(site)
        self.assertEqual((code, out), (0, str(libdir / "libpagedattn.so.0")))

    def test_not_found_says_where_it_looked(self):
        site = self.root / "site-packages"
        self.package_copy(site, config=str(self.root / "nowhere"))
        code, out = load(site)
        self.assertNotEqual(code, 0)
        self.assertIn("libpagedattn.so not found", out)
        self.assertIn(str(self.root / "nowhere" / "libpagedattn.so.0"), out)


if __name__ == "__main__":
    unittest.main(verbosity=1)
