#!/usr/bin/python3
"""Unit tests for tools/check_deps.py's rule for files outside Debian's packages.

CI once failed because CMake recorded /usr/local/bin/nvcc (a two-line launcher that execs
the CUDA toolkit's nvcc) instead of /usr/local/cuda/bin/nvcc: launchers and symlinks into
the allowed roots count as those roots; anything else hand-installed does not.
"""

import importlib.util
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = importlib.util.spec_from_file_location("check_deps", os.path.join(HERE, "..", "..", "tools", "check_deps.py"))
check_deps = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(check_deps)


class NonDebianRootTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, text):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_paths_under_the_cuda_roots(self):
        self.assertTrue(check_deps.in_non_debian_root("/usr/local/cuda/bin/nvcc"))
        self.assertTrue(check_deps.in_non_debian_root("/usr/local/cuda-13.0/lib64/libcublasLt.so"))
        self.assertFalse(check_deps.in_non_debian_root("/usr/local/cudafake/bin/nvcc"))
        self.assertFalse(check_deps.in_non_debian_root("/usr/local/lib/libdnnl.so"))

    def test_exec_launcher_into_the_toolkit_counts_as_the_toolkit(self):
        path = self.write("nvcc", '#!/bin/sh\nexec /usr/local/cuda-13.0/bin/nvcc "$@"\n')
        self.assertTrue(check_deps.in_non_debian_root(path))
        quoted = self.write("nvcc2", '#!/bin/sh\nexec "/usr/local/cuda/bin/nvcc" "$@"\n')
        self.assertTrue(check_deps.in_non_debian_root(quoted))

    def test_launcher_of_anything_else_is_hand_installed(self):
        elsewhere = self.write("protoc", '#!/bin/sh\nexec /opt/protobuf/bin/protoc "$@"\n')
        self.assertFalse(check_deps.in_non_debian_root(elsewhere))
        mixed = self.write("tool", "#!/bin/sh\nexec /usr/local/cuda/bin/nvcc\nexec /opt/x/bin/y\n")
        self.assertFalse(check_deps.in_non_debian_root(mixed))
        no_exec = self.write("script", "#!/bin/sh\necho /usr/local/cuda/bin/nvcc\n")
        self.assertFalse(check_deps.in_non_debian_root(no_exec))
        not_script = self.write("binary", "exec /usr/local/cuda/bin/nvcc\n")
        self.assertFalse(check_deps.in_non_debian_root(not_script))

    def test_symlink_into_the_toolkit(self):
        link = os.path.join(self.dir.name, "nvcc-link")
        os.symlink("/usr/local/cuda/bin/nvcc", link)
        self.assertTrue(check_deps.in_non_debian_root(link))


if __name__ == "__main__":
    unittest.main()
