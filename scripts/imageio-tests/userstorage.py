# A stand-in for the "userstorage" package that ovirt-imageio's tests
# import (https://github.com/nirs/userstorage), for scripts/imageio-tests.sh.
# Debian has no package for it.  It provides what the tests use: File, Mount
# and LoopDevice backends with .name, .path, .sector_size, exists(), setup(),
# use as a context manager; load_config(); missing_handler.
#
# Provisioning (create/delete) is done by the harness with
#   python3 -m userstorage create|delete storage.py
# With IMAGEIO_STORAGE=loop (default) a LoopDevice is a real loop device
# with the configured logical sector size over a sparse file under BASE_DIR,
# and a Mount is a real ext4/xfs made on one and mounted.  With
# IMAGEIO_STORAGE=files, a Mount is a plain directory under BASE_DIR (so
# its sector_size is only nominal) and LoopDevices are not created: tests
# that need them are then reported as missing (xfail), as with the real
# package when storage was not created.

import glob
import importlib.util
import logging
import os
import shutil
import subprocess
import sys

log = logging.getLogger("userstorage")

MODE = os.environ.get("IMAGEIO_STORAGE", "loop")


class Error(Exception):
    pass


class Missing(Error):
    pass


def missing_handler(msg):
    """Called on entering a backend that was not created; tests replace it."""
    raise Missing(msg)


class Base:
    name = ""
    sector_size = 512
    path = None
    required = True

    def __enter__(self):
        if not self.exists():
            # Looked up at call time: conftest.py sets it to pytest.xfail.
            sys.modules[__name__].missing_handler(
                "Storage {} is not available".format(self.name))
        self.setup()
        return self

    def __exit__(self, *args):
        self.teardown()

    def setup(self):
        pass

    def teardown(self):
        pass

    def __str__(self):
        return self.name


class LoopDevice(Base):
    def __init__(self, base_dir, name, size, sector_size=512, required=True):
        self.base_dir = base_dir
        self.name = name
        self.size = size
        self.sector_size = sector_size
        self.required = required
        self.path = os.path.join(base_dir, name + "-loop")
        self._backing = os.path.join(base_dir, name + "-backing")

    def create(self):
        if self.exists():
            return
        os.makedirs(self.base_dir, exist_ok=True)
        with open(self._backing, "w") as f:
            f.truncate(self.size)
        dev = subprocess.check_output(
            ["losetup", "--find", "--show", "--sector-size",
             str(self.sector_size), self._backing]).decode().strip()
        if os.path.islink(self.path):
            os.unlink(self.path)
        os.symlink(dev, self.path)

    def delete(self):
        if self.exists():
            subprocess.check_call(["losetup", "-d", os.path.realpath(self.path)])
        for p in (self.path, self._backing):
            if os.path.lexists(p):
                os.unlink(p)

    def exists(self):
        return os.path.exists(self.path)

    def setup(self):
        subprocess.check_call(["blkdiscard", self.path])


class Mount(Base):
    def __init__(self, loop, fstype="ext4"):
        self._loop = loop
        self.fstype = fstype
        self.path = os.path.join(loop.base_dir, loop.name + "-mount")

    name = property(lambda self: self._loop.name)
    sector_size = property(lambda self: self._loop.sector_size)
    required = property(lambda self: self._loop.required)

    def _mounted(self):
        with open("/proc/self/mounts") as f:
            return any(line.split()[1] == self.path for line in f)

    def create(self):
        if self.exists():
            return
        os.makedirs(self.path, exist_ok=True)
        if MODE == "files":
            return
        self._loop.create()
        dev = os.path.realpath(self._loop.path)
        subprocess.check_call(["mkfs", "-t", self.fstype, "-q", dev])
        subprocess.check_call(["mount", dev, self.path])

    def delete(self):
        if self._mounted():
            subprocess.check_call(["umount", self.path])
        if os.path.isdir(self.path):
            shutil.rmtree(self.path)
        self._loop.delete()

    def exists(self):
        if MODE == "files":
            return os.path.isdir(self.path)
        return self._mounted()

    def setup(self):
        for p in glob.glob(os.path.join(self.path, "*")):
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.remove(p)


class File(Base):
    def __init__(self, mount):
        self._mount = mount
        self.path = os.path.join(mount.path, "file")

    name = property(lambda self: self._mount.name)
    sector_size = property(lambda self: self._mount.sector_size)
    required = property(lambda self: self._mount.required)

    def create(self):
        self._mount.create()
        open(self.path, "w").close()

    def delete(self):
        self._mount.delete()

    def exists(self):
        return os.path.exists(self.path)

    def setup(self):
        open(self.path, "w").close()


def load_config(filename):
    """Load a storage configuration module (BASE_DIR, BACKENDS)."""
    name = os.path.splitext(os.path.basename(filename))[0]
    spec = importlib.util.spec_from_file_location(name, filename)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv):
    if len(argv) != 3 or argv[1] not in ("create", "delete"):
        sys.exit("usage: python3 -m userstorage create|delete CONFIG")
    backends = load_config(argv[2]).BACKENDS
    failed = False
    for name, b in backends.items():
        if argv[1] == "create" and MODE == "files" and \
                isinstance(b, LoopDevice):
            print("userstorage: %s: not created (IMAGEIO_STORAGE=files)" % name)
            continue
        try:
            getattr(b, argv[1])()
            print("userstorage: %s: %s %s" % (name, argv[1], b.path))
        except (OSError, subprocess.CalledProcessError) as e:
            print("userstorage: %s: %s failed: %s" % (name, argv[1], e))
            failed = True
    sys.exit(1 if failed and argv[1] == "delete" else 0)


if __name__ == "__main__":
    main(sys.argv)
