from collections import Counter

from talk_helpers.lessons.datasets.handed_over import colleagues_loader


def test_the_colleagues_loader_reads_every_id_once_per_worker():
    batches = list(colleagues_loader(0, 1, 0, size=6, num_workers=2, batch_size=3))
    counts = Counter(i for batch in batches for i in batch.tolist())
    assert counts == {i: 2 for i in range(6)}
    assert [len(b) for b in batches] == [3, 3, 3, 3]
