"""check_containerfile.py: a smoke test of deploy/Containerfile's steps on this machine
(Debian 12, like the image's base), without building the image:

- every FROM is a Debian 12 image (the image is built from Debian packages only);
- every `apt-get install` resolves here: `apt-get install --simulate` of its package list
  (a made-up package name is checked to fail the same way, so the check can fail);
- every COPY from the build context names a file or folder of the source tree;
- the build stage's cmake configure step runs, with its options, into a scratch folder;
- the built flashgate's --check-config accepts the image's config with the image's ENV;
- the shared libraries the built flashgate links, where a Debian package owns them, come
  with the runtime stage's packages (their Depends, recursively); the sanitizer runtimes of
  the test build and libraries outside Debian (CUDA, NCCL: the image builds with
  FG_CUDA=OFF) are left out.

Usage: check_containerfile.py SOURCE_DIR BUILD_DIR. Prints "N passed, M failed"; exits 77 (skip)
when apt has no package lists to resolve against."""
import os
import re
import shlex
import subprocess
import sys
import tempfile

SRC, BUILD = sys.argv[1], sys.argv[2]
FILE = os.path.join(SRC, "deploy", "Containerfile")
failures = []
passed = 0


def case(name, ok, detail=""):
    global passed
    if ok:
        passed += 1
        print(f"ok   {name}")
    else:
        failures.append(name)
        print(f"FAIL {name}: {detail}")


def instructions():
    """(stage index, instruction, argument text) with continuation lines joined."""
    out, cur, stage = [], "", -1
    for line in open(FILE):
        s = line.rstrip("\n")
        if not cur and (not s.strip() or s.lstrip().startswith("#")):
            continue
        cur += s[:-1] + " " if s.endswith("\\") else s
        if s.endswith("\\"):
            continue
        word, _, rest = cur.strip().partition(" ")
        if word.upper() == "FROM":
            stage += 1
        out.append((stage, word.upper(), rest.strip()))
        cur = ""
    return out


def apt_packages(run):
    """The package lists of the `apt-get install` commands in one RUN."""
    lists = []
    for cmd in re.split(r"&&|;", run):
        words = shlex.split(cmd)
        while words and "=" in words[0]:
            words.pop(0)  # DEBIAN_FRONTEND=...
        if words[:2] == ["apt-get", "install"]:
            lists.append([w for w in words[2:] if not w.startswith("-")])
    return lists


def simulate(pkgs):
    r = subprocess.run(["apt-get", "install", "--simulate", "-qq", "--no-install-recommends", *pkgs],
                       capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


if subprocess.run(["apt-cache", "show", "libc6"], capture_output=True).returncode != 0:
    print("SKIP: apt has no package lists here (apt-get update; deploy/install-deps.sh runs it when it installs)")
    sys.exit(77)
ins = instructions()
froms = [a for _, w, a in ins if w == "FROM"]
case("every FROM is Debian 12", froms and all(re.match(r"debian:bookworm(-slim)?(\s|$)", f) for f in froms), str(froms))

stage_pkgs = {}
for stage, word, arg in ins:
    if word == "RUN":
        for pkgs in apt_packages(arg):
            rc, out = simulate(pkgs)
            case(f"stage {stage}: apt-get install --simulate {' '.join(pkgs)}", rc == 0, out[-400:])
            stage_pkgs.setdefault(stage, []).extend(pkgs)
rc, out = simulate(["flashgate-no-such-package"])
case("an unknown package fails the simulation", rc != 0, out[-200:])

for stage, word, arg in ins:
    if word == "COPY" and not arg.startswith("--from"):
        *sources, _dest = shlex.split(arg)
        for s in sources:
            case(f"COPY {s} exists in the source tree", os.path.exists(os.path.join(SRC, s)))

configure = None
for stage, word, arg in ins:
    if word == "RUN" and "cmake -S" in arg:
        configure = shlex.split(next(c for c in arg.split("&&") if "cmake -S" in c))
case("the build stage configures with cmake", configure is not None)
if configure:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [w if i == 0 or configure[i - 1] not in ("-S", "-B") else (SRC if configure[i - 1] == "-S" else tmp)
               for i, w in enumerate(configure)]
        r = subprocess.run(cmd, cwd=SRC, capture_output=True, text=True)
        case(f"cmake configure as in the image: {' '.join(configure[1:])}", r.returncode == 0, (r.stdout + r.stderr)[-800:])

# the image's config with the image's ENV, through the gateway's own check
env = dict(os.environ)
for stage, word, arg in ins:
    if word == "ENV" and stage == max(s for s, _, _ in ins):
        for kv in shlex.split(arg):
            k, _, v = kv.partition("=")
            env[k] = v
cfg = next((shlex.split(a)[-2] for st, w, a in ins if w == "COPY" and a.endswith("/etc/flashgate/flashgate.json")), None)
if cfg:
    r = subprocess.run([os.path.join(BUILD, "bin", "flashgate"), "--config", os.path.join(SRC, cfg), "--check-config"],
                       env=env, capture_output=True, text=True)
    case("flashgate --check-config accepts the image's config and ENV", r.returncode == 0 and "0.0.0.0:8080" in r.stdout,
         r.stdout + r.stderr)
else:
    case("the image copies a config to /etc/flashgate/flashgate.json", False)

runtime = stage_pkgs.get(max(stage_pkgs) if stage_pkgs else 0, [])
closure = set()
if runtime:
    r = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
                        "--no-breaks", "--no-replaces", "--no-enhances", *runtime], capture_output=True, text=True)
    closure = {line.strip() for line in r.stdout.splitlines() if line and not line.startswith(" ")}
binary = os.path.join(BUILD, "bin", "flashgate")
ldd = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
missing = []
for path in re.findall(r"=> (/\S+)", ldd):
    r = subprocess.run(["dpkg", "-S", os.path.realpath(path)], capture_output=True, text=True)
    if r.returncode != 0:
        r = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
    if r.returncode != 0:
        continue  # not from Debian (CUDA, NCCL): the image is built without them
    pkg = r.stdout.split(":")[0].strip()
    if re.match(r"lib(asan|ubsan|tsan|lsan)\d*$", pkg):
        continue  # the sanitizer runtimes of the test build
    if pkg not in closure:
        missing.append(f"{os.path.basename(path)} ({pkg})")
case("the runtime stage's packages bring every Debian library flashgate links", not missing and closure,
     f"missing: {missing}")

print(f"{passed} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
