"""Real data libraries (HF datasets, webdataset, torchdata, litdata, mosaicml-streaming)
and a course module's recipes, as loader factories the audit runs unchanged (notebook 10).

Every ``make_*`` function has the signature the audit expects, ``make_loader(rank,
world_size, epoch)``, once its settings are bound with ``functools.partial``. A library is
imported only when its factory runs (in a rank), so ``import talk_helpers.libraries as la``
is cheap and needs none of them.
"""

from talk_helpers.lessons.datasets.shard_files import write_tar_shards
from talk_helpers.libraries.common import (
    BATCH_SIZE,
    N_SAMPLES,
    NUM_WORKERS,
    SHARD_SIZES,
    SHARD_SIZES_MANY,
    make_resumed,
)
from talk_helpers.libraries.guide_recipes import (
    GUIDE_SHARDS,
    create_webdataset_loader,
    load_sharded_dataset,
    load_sharded_round_robin,
    make_guide_pattern2,
    make_guide_pattern3,
    shard_paths,
)
from talk_helpers.libraries.hugging_face import (
    hf_iterable,
    make_hf_loader,
    make_hf_stateful,
    mystery_loader,
)
from talk_helpers.libraries.litdata_loaders import litdata_dir, make_litdata_loader
from talk_helpers.libraries.reference_loaders import make_reference_loader, make_reference_stateful
from talk_helpers.libraries.streaming_assignment import (
    make_streaming_loader,
    make_streaming_resumed,
    streaming_modules,
    streaming_world_source,
)
from talk_helpers.libraries.table import (
    AuditTable,
    LibraryRow,
    dropped_each_epoch,
    first_batches,
    resume_verdict,
    same_samples_each_epoch,
    short_error,
)
from talk_helpers.libraries.torchdata_loaders import (
    make_map_stateful,
    make_nodes_loader,
    make_plain_iterable_stateful,
    make_shuffled_iterable_stateful,
)
from talk_helpers.libraries.webdataset_loaders import make_wds_loader, make_wds_resampled

__all__ = [
    "BATCH_SIZE", "GUIDE_SHARDS", "N_SAMPLES", "NUM_WORKERS", "SHARD_SIZES", "SHARD_SIZES_MANY",
    "AuditTable", "LibraryRow", "create_webdataset_loader",
    "hf_iterable", "litdata_dir", "load_sharded_dataset", "load_sharded_round_robin",
    "make_guide_pattern2", "make_guide_pattern3", "make_hf_loader", "make_hf_stateful",
    "make_litdata_loader", "make_map_stateful", "make_nodes_loader",
    "make_plain_iterable_stateful", "make_reference_loader", "make_reference_stateful",
    "make_shuffled_iterable_stateful", "dropped_each_epoch", "first_batches",
    "same_samples_each_epoch", "streaming_world_source",
    "make_resumed", "make_streaming_loader", "make_streaming_resumed", "make_wds_loader",
    "make_wds_resampled", "mystery_loader", "resume_verdict", "shard_paths", "short_error",
    "streaming_modules", "write_tar_shards",
]
