"""Shard files on local disk, written on first use: tar shards of sample ids, the format
webdataset reads (notebooks 03 and 10)."""

import io
import os
import tarfile

from talk_helpers.private_dirs import private_dir


def write_tar_shards(sizes) -> list[str]:
    """Tar shards holding the ids ``0..sum(sizes)-1`` in order, one ``<key>.id`` member per
    sample; written once (atomically, so ranks may race) and reused."""
    sizes = tuple(int(s) for s in sizes)
    folder = os.path.join(private_dir("shards"), "wds-" + "-".join(map(str, sizes)))
    os.makedirs(folder, exist_ok=True)
    paths, start = [], 0
    for i, size in enumerate(sizes):
        path = os.path.join(folder, f"shard-{i:05d}.tar")
        if not os.path.exists(path):
            tmp = f"{path}.{os.getpid()}.tmp"
            with tarfile.open(tmp, "w") as tar:
                for sample in range(start, start + size):
                    data = str(sample).encode()
                    info = tarfile.TarInfo(f"{sample:06d}.id")
                    info.size, info.mtime = len(data), 0
                    tar.addfile(info, io.BytesIO(data))
            os.replace(tmp, path)
        paths.append(path)
        start += size
    return paths
