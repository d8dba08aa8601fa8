"""Child process for the synchronous log's kill -9 test: appends batches to one partition
forever, printing each acknowledged end offset (after its fdatasync)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from test_storage import make_batch  # noqa: E402

from scabbard.peers.synclog import Partition, to_rows  # noqa: E402


def main() -> None:
    part = Partition(sys.argv[1])
    while True:
        b = make_batch(part.end, 500)
        print(part.append(to_rows(b), len(b)), flush=True)


if __name__ == "__main__":
    main()
