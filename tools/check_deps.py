#!/usr/bin/python3
"""Checks that scripts/deps/debian-packages.txt names every Debian package the build uses.

A machine that once had a package installed by hand builds fine while a fresh one fails
(oneDNN's CMake config needs OpenCL, which libdnnl-dev only Recommends). This check
makes that visible on any machine: it collects every file a CMake configure found or
loaded outside the source and build trees, and after a build every header the compiler
read, finds the Debian package that owns each one (dpkg's file lists), and fails when

  * a file belongs to no package that the list names or pulls in through Depends /
    Pre-Depends (Recommends do not count: install-deps does not install them), or to
    no package at all outside the allowed non-Debian roots (the CUDA toolkit, and the
    cudnn-frontend headers install-deps fetches into .deps/);
  * a listed package is used by nothing found (the list drifted).

Where the files come from:
  * the configure's trace (`cmake --trace-expand --trace-format=json-v1`): every CMake
    file that ran a command (package configs, find modules, the toolchain's modules);
  * CMakeCache.txt: every FILEPATH entry (find_library, find_program, find_file), and
    every find_path result resolved to the file it looked for (dir + one of NAMES);
  * the generated build.ninja / rules.ninja: absolute paths to files (libraries on
    link lines, compilers, programs custom commands run);
  * with --ninja-deps: `ninja -t deps`, every header each object was compiled from.

Usage:
  tools/check_deps.py --build DIR --trace FILE [--ninja-deps] [--list FILE] [--verbose]
Exit status 0 when consistent, 1 with one line per problem naming the file and the
package to add (or remove).
"""

import argparse
import collections
import glob
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(HERE)
DEFAULT_LIST = os.path.join(SOURCE_DIR, "scripts", "deps", "debian-packages.txt")

# Files outside Debian's packages that the build may use, and why.
# Build-time headers scripts/install-deps.sh fetches into the (gitignored) source tree: they
# are not source files, so they are checked here like any other dependency, not skipped.
FETCHED_DEPS_DIR = os.path.join(SOURCE_DIR, ".deps")
NON_DEBIAN_ROOTS = {
    "/usr/local/cuda": "the CUDA toolkit, preinstalled (not a Debian package; optional, MPC_WITH_CUDA=AUTO)",
    os.path.join(FETCHED_DEPS_DIR, "cudnn-frontend"):
        "cudnn-frontend's headers (cuDNN's C++ graph API, header-only; not packaged by Debian), pinned in "
        "scripts/deps/cudnn-frontend.txt and fetched from PyPI by scripts/install-deps.sh where the CUDA toolkit is",
}
NON_DEBIAN_ROOT_PATTERN = re.compile(r"^/usr/local/cuda(-[0-9.]+)?(/|$)|^" +
                                     re.escape(os.path.realpath(os.path.join(FETCHED_DEPS_DIR, "cudnn-frontend"))) +
                                     r"(/|$)")
# A launcher such as /usr/local/bin/nvcc (CUDA images put one on PATH: `exec /usr/local/cuda-13.0/bin/nvcc "$@"`)
# belongs to the root it starts; CMake records the launcher when /usr/local/cuda/bin is not on PATH.
EXEC_WRAPPER_PATTERN = re.compile(r"^\s*exec\s+\"?(/[^\s\"]+)", re.MULTILINE)
MAX_WRAPPER_BYTES = 4096


def in_non_debian_root(path):
    """True for a path under an allowed root, a symlink into one, or a small script that execs a program in one."""
    if NON_DEBIAN_ROOT_PATTERN.match(path) or NON_DEBIAN_ROOT_PATTERN.match(os.path.realpath(path)):
        return True
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > MAX_WRAPPER_BYTES:
            return False
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return False
    if not text.startswith("#!"):
        return False
    targets = EXEC_WRAPPER_PATTERN.findall(text)
    return bool(targets) and all(NON_DEBIAN_ROOT_PATTERN.match(os.path.realpath(t)) for t in targets)

# Directories that are not evidence of anything (every package puts files below them).
UNINFORMATIVE_DIRS = {"/", "/usr", "/usr/include", "/usr/lib", "/usr/share", "/usr/bin", "/usr/local",
                      "/usr/local/include", "/usr/local/lib", "/lib", "/usr/lib/x86_64-linux-gnu",
                      "/usr/include/x86_64-linux-gnu", "/usr/lib/gcc", "/usr/lib/x86_64-linux-gnu/cmake"}


def read_package_list(path):
    packages = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                packages.append(line.split()[0])
    return packages


class Dpkg:
    """Installed packages: owners of files, dependencies, virtual packages."""

    def __init__(self):
        self.owners = collections.defaultdict(set)
        for list_file in glob.glob("/var/lib/dpkg/info/*.list"):
            pkg = os.path.basename(list_file)[: -len(".list")].split(":")[0]
            with open(list_file, errors="replace") as f:
                for line in f:
                    self.owners[line.rstrip("\n")].add(pkg)
        self.installed = set()
        self.essential = set()
        self.depends = {}
        self.providers = collections.defaultdict(set)
        out = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Package}\t${db:Status-Abbrev}\t${Essential}\t${Pre-Depends}\t"
             "${Depends}\t${Provides}\n"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            name, status, essential, pre_depends, depends, provides = (line.split("\t") + [""] * 6)[:6]
            if not status.startswith("ii"):
                continue
            self.installed.add(name)
            if essential == "yes":
                self.essential.add(name)
            self.depends[name] = self._parse_relations(pre_depends) + self._parse_relations(depends)
            for group in self._parse_relations(provides):
                for virtual in group:
                    self.providers[virtual].add(name)

    @staticmethod
    def _parse_relations(text):
        groups = []
        for group in text.split(","):
            names = [re.sub(r"\(.*?\)|\[.*?\]|<.*?>", "", alt).strip().split(":")[0] for alt in group.split("|")]
            names = [n for n in names if n]
            if names:
                groups.append(names)
        return groups

    def closure(self, roots):
        """Every installed package reachable from roots through Depends / Pre-Depends.
        Of an alternative (a | b), every installed choice counts; a virtual name counts
        through its installed providers."""
        seen, stack = set(), list(roots)
        while stack:
            pkg = stack.pop()
            if pkg in seen:
                continue
            seen.add(pkg)
            for group in self.depends.get(pkg, []):
                for name in group:
                    for real in ({name} & self.installed) | self.providers.get(name, set()):
                        if real not in seen:
                            stack.append(real)
        return seen

    def owners_of(self, path):
        """The packages owning path, following merged-/usr aliases and then symlinks one
        step at a time (so a -dev symlink is owned by the -dev package, not the runtime)."""
        seen = set()
        while path and path not in seen:
            seen.add(path)
            for alias in _merged_usr_aliases(path):
                if alias in self.owners:
                    return self.owners[alias]
            if not os.path.islink(path):
                break
            target = os.readlink(path)
            path = os.path.normpath(os.path.join(os.path.dirname(path), target))
        # A path through a symlinked directory (e.g. /usr/lib/jvm/default-java/...).
        real = os.path.realpath(path)
        for alias in _merged_usr_aliases(real):
            if alias in self.owners:
                return self.owners[alias]
        return set()


def _merged_usr_aliases(path):
    """Debian 12 merges /bin, /lib... into /usr: dpkg may list either spelling."""
    aliases = [path]
    for top in ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"):
        if path.startswith("/usr" + top + "/"):
            aliases.append(path[len("/usr"):])
        elif path.startswith(top + "/"):
            aliases.append("/usr" + path)
    return aliases


class Evidence:
    """The files the build uses, each with where it was seen."""

    def __init__(self, source_dir, build_dir):
        self.source_dir = os.path.realpath(source_dir)
        self.build_dir = os.path.realpath(build_dir)
        self.files = collections.OrderedDict()  # path -> why
        self.dirs = collections.OrderedDict()   # include / link directories -> why

    def _outside_trees(self, path):
        real = os.path.realpath(path)
        fetched = os.path.realpath(FETCHED_DEPS_DIR)
        if real == fetched or real.startswith(fetched + "/"):
            return True  # fetched dependencies, not sources: checked against NON_DEBIAN_ROOTS
        return not (real == self.source_dir or real.startswith(self.source_dir + "/") or
                    real == self.build_dir or real.startswith(self.build_dir + "/") or
                    real.startswith("/tmp/") or real.startswith("/proc/"))

    def add(self, path, why):
        if not path.startswith("/") or not os.path.exists(path) or not self._outside_trees(path):
            return
        path = os.path.normpath(path)
        if os.path.isdir(path):
            if path not in UNINFORMATIVE_DIRS:
                self.dirs.setdefault(path, why)
        else:
            self.files.setdefault(path, why)


def collect_trace(trace_path, evidence):
    """Files CMake ran commands from, and each find_path's variable -> NAMES."""
    find_path_names = collections.defaultdict(list)
    with open(trace_path, errors="replace") as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            source = record.get("file")
            if source:
                evidence.add(source, "loaded by the CMake configure")
            if record.get("cmd", "").lower() == "find_path":
                args = record.get("args", [])
                if not args:
                    continue
                names, i = [], 1
                if len(args) > 1 and args[1] == "NAMES":
                    i = 2
                    while i < len(args) and args[i] not in ("HINTS", "PATHS", "PATH_SUFFIXES", "DOC", "NO_DEFAULT_PATH",
                                                              "REQUIRED", "NO_CACHE", "ENV", "NO_CMAKE_PATH",
                                                              "NO_CMAKE_ENVIRONMENT_PATH", "NO_SYSTEM_ENVIRONMENT_PATH",
                                                              "NO_CMAKE_SYSTEM_PATH", "NO_PACKAGE_ROOT_PATH",
                                                              "CMAKE_FIND_ROOT_PATH_BOTH", "ONLY_CMAKE_FIND_ROOT_PATH",
                                                              "NO_CMAKE_FIND_ROOT_PATH", "NO_CMAKE_INSTALL_PREFIX",
                                                              "VALIDATOR"):
                        names.append(args[i])
                        i += 1
                elif len(args) > 1:
                    names.append(args[1])
                find_path_names[args[0]].extend(names)
    return find_path_names


def collect_cache(build_dir, find_path_names, evidence):
    entry = re.compile(r"^([A-Za-z0-9_.+-]+):(FILEPATH|PATH|STRING|INTERNAL)=(.*)$")
    with open(os.path.join(build_dir, "CMakeCache.txt"), errors="replace") as f:
        for line in f:
            m = entry.match(line.rstrip("\n"))
            if not m:
                continue
            name, kind, value = m.groups()
            if kind == "FILEPATH":
                for part in value.split(";"):
                    evidence.add(part, f"CMakeCache.txt {name}")
            elif kind == "PATH" and name in find_path_names and os.path.isdir(value):
                for wanted in find_path_names[name]:
                    candidate = os.path.join(value, wanted)
                    if os.path.exists(candidate):
                        evidence.add(candidate, f"CMakeCache.txt {name} (find_path of {wanted})")
                        break


def collect_ninja(build_dir, evidence):
    token = re.compile(r"(?:^|[\s=;:'\"]|-I|-isystem|-L)(/[^\s;:'\"$]+)")
    for name in ("build.ninja", "CMakeFiles/rules.ninja"):
        path = os.path.join(build_dir, name)
        if not os.path.exists(path):
            continue
        with open(path, errors="replace") as f:
            for line in f:
                for m in token.finditer(line):
                    value = m.group(1).rstrip(",)")
                    evidence.add(value, f"{name}")


def collect_ninja_deps(build_dir, evidence):
    out = subprocess.run(["ninja", "-C", build_dir, "-t", "deps"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"check-deps: `ninja -C {build_dir} -t deps` failed: {out.stderr.strip()}")
    target = ""
    for line in out.stdout.splitlines():
        if line and not line.startswith(" "):
            target = line.split(":")[0]
        elif line.strip():
            evidence.add(line.strip(), f"compiled into {target}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", required=True, help="a configured build directory")
    parser.add_argument("--trace", help="the configure's --trace-format=json-v1 output")
    parser.add_argument("--ninja-deps", action="store_true", help="also check every header the build compiled")
    parser.add_argument("--list", default=DEFAULT_LIST, help="the package list install-deps installs")
    parser.add_argument("--verbose", action="store_true", help="print every file with its package")
    args = parser.parse_args()

    listed = read_package_list(args.list)
    dpkg = Dpkg()
    problems = []
    not_installed = [p for p in listed if p not in dpkg.installed]
    for p in not_installed:
        problems.append(f"{p} is listed in {os.path.relpath(args.list, SOURCE_DIR)} but not installed: "
                        "run scripts/install-deps.sh first")

    evidence = Evidence(SOURCE_DIR, args.build)
    find_path_names = collect_trace(args.trace, evidence) if args.trace else {}
    collect_cache(args.build, find_path_names, evidence)
    collect_ninja(args.build, evidence)
    if args.ninja_deps:
        collect_ninja_deps(args.build, evidence)

    allowed = dpkg.closure(listed) | dpkg.essential
    closure_of = {p: dpkg.closure([p]) for p in listed}
    used_by = collections.defaultdict(list)  # listed package -> files that need it
    unowned, outside = [], collections.defaultdict(list)

    def attribute(path, owners):
        for p in listed:
            if p in owners:
                used_by[p].append(path)
        # A file owned through a dependency counts for the listed packages that pull it in
        # alone (a shared dependency such as libc6 proves nothing about any one of them).
        for owner in owners:
            pulling = [p for p in listed if owner in closure_of[p]]
            if len(pulling) == 1:
                used_by[pulling[0]].append(path)

    # Files must belong to an allowed package (and count as use of it); directories (include
    # and link paths) only must not belong to packages outside the allowed set alone.
    checked = [(path, why, True) for path, why in evidence.files.items()]
    checked += [(path + "/", why, False) for path, why in evidence.dirs.items()]
    for path, why, is_file in checked:
        if in_non_debian_root(path.rstrip("/") or "/"):
            continue
        owners = dpkg.owners_of(path.rstrip("/") or "/")
        if args.verbose:
            print(f"{path}\t{','.join(sorted(owners)) or '-'}\t{why}")
        if not owners:
            if is_file:
                unowned.append((path, why))
            continue
        if not owners & allowed:
            outside[min(owners)].append((path, why))
        if is_file:
            attribute(path, owners)

    rel_list = args.list if args.list != DEFAULT_LIST else os.path.relpath(args.list, SOURCE_DIR)
    # Name the package to add: of the missing ones, those no other missing one pulls in.
    pulled_by = {pkg: [q for q in outside if q != pkg and pkg in dpkg.closure([q])] for pkg in outside}
    for pkg, files in sorted(outside.items()):
        path, why = files[0]
        more = f" (and {len(files) - 1} more of its files)" if len(files) > 1 else ""
        fix = (f"adding {pulled_by[pkg][0]} (above) pulls it in" if pulled_by[pkg] else f"add {pkg} to {rel_list}")
        problems.append(f"{path} ({why}){more} belongs to {pkg}, which {rel_list} neither lists nor pulls in "
                        f"through Depends: {fix}")
    for path, why in unowned:
        problems.append(f"{path} ({why}) belongs to no Debian package and is outside the allowed non-Debian roots "
                        f"({', '.join(NON_DEBIAN_ROOTS)}): it was installed by hand; find the package that ships it "
                        f"(`apt-file search`) and add it to {rel_list}")
    # Unused packages are judged from a configure's trace (find_path results resolved to the
    # files they looked for, e.g. the data sets); --compiled alone sees only the headers.
    if not not_installed and args.trace:
        for p in listed:
            if not used_by.get(p):
                problems.append(f"{p} is listed in {rel_list} but nothing the build found belongs to it or to a "
                                f"dependency only it pulls in: remove it, or make CMake find what needs it")

    if args.verbose or not problems:
        print(f"check-deps: {len(evidence.files)} files and {len(evidence.dirs)} directories outside the source "
              f"and build trees; {len(listed)} listed packages, {len(allowed)} allowed with their Depends")
        for p in listed:
            files = used_by.get(p, [])
            print(f"  {p:<24} {len(files):5d} files, e.g. {files[0] if files else '-'}")
    for line in problems:
        print(f"check-deps: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
