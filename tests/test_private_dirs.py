"""Everything the package writes goes in a folder of the user's own: made with mode 0700,
and never one that another user made or may write into (a shared lab server's /tmp)."""

import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from talk_helpers import private_dirs
from talk_helpers.lessons.datasets.shard_files import write_tar_shards

ROOT = Path(__file__).resolve().parents[1]
OTHER_USER = "nobody"  # an unprivileged account most Linux systems have


@pytest.fixture
def shared_tmp(monkeypatch):
    """A temporary folder like a server's /tmp (mode 1777), used as this process's."""
    folder = Path(tempfile.mkdtemp(prefix="shared-tmp-"))
    folder.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _ids_in(paths) -> list[int]:
    ids = []
    for path in paths:
        with tarfile.open(path) as tar:
            ids += [int(tar.extractfile(member).read()) for member in tar.getmembers()]
    return ids


def _plant_shards(folder: Path, ids) -> None:
    """A tar shard holding ``ids``, as someone else might leave it for us to read."""
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(folder / "shard-00000.tar", "w") as tar:
        for i in ids:
            data = str(i).encode()
            info = tarfile.TarInfo(f"{i:06d}.id")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_every_level_of_a_private_dir_is_made_with_mode_0700(shared_tmp):
    path = Path(private_dirs.private_dir("shards"))
    assert path.is_relative_to(shared_tmp)
    levels = [path, path.parent, path.parent.parent]
    assert path.parent.parent == shared_tmp / f"talk_helpers-{os.geteuid()}"
    assert [_mode(level) for level in levels] == [0o700] * 3
    assert {os.lstat(level).st_uid for level in levels} == {os.geteuid()}


def test_the_same_name_gives_the_same_folder_in_every_process(shared_tmp):
    here = private_dirs.private_dir("library_audit")
    there = subprocess.run(
        [sys.executable, "-c", "from talk_helpers.private_dirs import private_dir; "
                               "print(private_dir('library_audit'))"],
        env=dict(os.environ, TMPDIR=str(shared_tmp)), capture_output=True, text=True,
        check=True).stdout.strip()
    assert here == there


def test_tar_shards_never_come_from_the_old_shared_name_or_a_planted_folder(shared_tmp):
    """Someone made the folder the shards used to live in, and the first name of this
    user's folder, writable by all, and planted shards of wrong ids in both."""
    uid = os.geteuid()
    _plant_shards(shared_tmp / "talk_helpers_shards" / "wds-3-2", [666] * 3)
    squatted = shared_tmp / f"talk_helpers-{uid}"
    squatted.mkdir()
    squatted.chmod(0o777)
    for checkout in (private_dirs._checkout_name(), "any"):
        _plant_shards(squatted / checkout / "shards" / "wds-3-2", [666] * 3)

    paths = write_tar_shards((3, 2))

    assert _ids_in(paths) == [0, 1, 2, 3, 4]
    assert all(Path(p).is_relative_to(shared_tmp / f"talk_helpers-{uid}-1") for p in paths)


def test_a_link_at_the_users_name_is_never_followed(shared_tmp):
    elsewhere = Path(tempfile.mkdtemp(dir=shared_tmp))
    (shared_tmp / f"talk_helpers-{os.geteuid()}").symlink_to(elsewhere)
    path = Path(private_dirs.private_dir("shards"))
    assert path.is_relative_to(shared_tmp / f"talk_helpers-{os.geteuid()}-1")
    assert list(elsewhere.iterdir()) == []


def test_a_folder_of_the_users_own_that_others_may_read_is_made_private(shared_tmp):
    mine = shared_tmp / f"talk_helpers-{os.geteuid()}"
    mine.mkdir(mode=0o755)
    mine.chmod(0o755)
    path = Path(private_dirs.private_dir("shards"))
    assert path.is_relative_to(mine)
    assert _mode(mine) == 0o700


def test_a_folder_another_user_owns_is_never_used(shared_tmp):
    if os.geteuid() != 0:
        pytest.skip("only root can make a folder another user owns")
    theirs = shared_tmp / "talk_helpers-0"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    path = Path(private_dirs.private_dir("shards"))
    assert path.is_relative_to(shared_tmp / "talk_helpers-0-1")


def test_when_every_name_is_taken_the_error_says_what_to_do(shared_tmp, monkeypatch):
    monkeypatch.setattr(private_dirs, "ATTEMPTS", 3)
    stem = f"talk_helpers-{os.geteuid()}"
    for name in (stem, f"{stem}-1", f"{stem}-2"):
        (shared_tmp / name).write_text("not a folder")
    with pytest.raises(private_dirs.UnsafeDirectory, match="Set TMPDIR to a folder"):
        private_dirs.private_dir("shards")


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", None])
def test_a_name_that_is_not_one_folder_is_refused(name):
    with pytest.raises(ValueError, match="name must be one folder name"):
        private_dirs.private_dir(name)


BUILD = """
import json, os, stat, tarfile
from talk_helpers.lessons.datasets.shard_files import write_tar_shards
from talk_helpers.private_dirs import user_root
paths = write_tar_shards((3, 2))
ids = []
for p in paths:
    with tarfile.open(p) as tar:
        ids += [int(tar.extractfile(m).read()) for m in tar.getmembers()]
root = user_root()
print(json.dumps({"uid": os.geteuid(), "paths": paths, "ids": ids, "root": str(root),
                  "mode": stat.S_IMODE(os.stat(root).st_mode)}))
"""


def _second_user(shared_tmp: Path) -> tuple[int, int]:
    """(uid, gid) of an unprivileged user who can run this checkout's Python and write in
    ``shared_tmp``, or skip saying why there is none."""
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("two users side by side need root (to run as a second user) on Linux")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is missing: cannot run as a second user")
    import pwd

    try:
        entry = pwd.getpwnam(OTHER_USER)
    except KeyError:
        pytest.skip(f"no user {OTHER_USER!r} on this machine to run as")
    probe = subprocess.run(
        ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups",
         sys.executable, "-c", "import tempfile, talk_helpers; tempfile.mkstemp()"],
        cwd=ROOT, env=dict(os.environ, TMPDIR=str(shared_tmp)), capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"user {OTHER_USER!r} cannot run this checkout's Python in {shared_tmp} "
                    f"({probe.stderr.decode()[-200:].strip()})")
    return entry.pw_uid, entry.pw_gid


def test_two_users_build_their_shards_side_by_side_in_one_shared_tmp(shared_tmp):
    uid, gid = _second_user(shared_tmp)
    env = dict(os.environ, TMPDIR=str(shared_tmp), PYTHONDONTWRITEBYTECODE="1")
    commands = {
        "root": [sys.executable, "-c", BUILD],
        OTHER_USER: ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                     sys.executable, "-c", BUILD],
    }
    running = {who: subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
               for who, command in commands.items()}
    results = {}
    for who, process in running.items():
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, f"{who}: {err[-2000:]}"
        results[who] = json.loads(out.strip().splitlines()[-1])

    mine, theirs = results["root"], results[OTHER_USER]
    assert (mine["uid"], theirs["uid"]) == (0, uid)
    assert mine["ids"] == theirs["ids"] == [0, 1, 2, 3, 4]
    assert mine["root"] == str(shared_tmp / "talk_helpers-0")
    assert theirs["root"] == str(shared_tmp / f"talk_helpers-{uid}")
    assert mine["mode"] == theirs["mode"] == 0o700
    assert os.stat(theirs["root"]).st_uid == uid
    # the second user cannot even look into the first one's folder
    peek = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                           "ls", mine["root"]], capture_output=True, text=True)
    assert peek.returncode != 0 and "Permission denied" in peek.stderr
