"""``python -m talk_helpers.diagrams OUTDIR``: regenerate every committed figure."""

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from talk_helpers.diagrams import all_figures, save_figure  # noqa: E402


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: python -m talk_helpers.diagrams OUTDIR")
    outdir = Path(argv[0])
    outdir.mkdir(parents=True, exist_ok=True)
    for name, make in all_figures().items():
        fig = make()
        save_figure(fig, outdir / name)
        plt.close(fig)
        print(f"wrote {outdir / name}")


if __name__ == "__main__":
    main(sys.argv[1:])
