"""Child process for the kill -9 tests: appends batches forever, printing each acknowledgement.

``python tests/storage_child.py DIR plain`` writes until killed.  ``... DIR tear N`` makes the
write after the N-th acknowledgement put only half its bytes on disk, then kills itself with
SIGKILL - a torn write by a real crash.
"""

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from test_storage import SCHEMA, make_batch  # noqa: E402

from scabbard.storage import BlockManager, StorageConfig  # noqa: E402

CONFIG = StorageConfig(file_bytes=1 << 20, pool_files=2, bulk_bytes=1 << 18)


def main() -> None:
    folder, mode = sys.argv[1], sys.argv[2]
    tear_after = int(sys.argv[3]) if mode == "tear" else -1
    bm = BlockManager(folder, CONFIG)
    sid = bm.stream("in", SCHEMA)
    off = bm.durable_end(sid)
    acks = 0
    if mode == "tear":
        real = bm._pwritev

        def pwritev(f, bufs, pos):
            if acks >= tear_after and bufs[0].nbytes > 4096:
                flat = bufs[0]
                os.pwrite(f.fd, flat[: flat.nbytes // 2 // 4096 * 4096], pos)
                os.kill(os.getpid(), signal.SIGKILL)
            real(f, bufs, pos)

        bm._pwritev = pwritev
    while True:
        b = make_batch(off, 1000)
        end = bm.append(sid, b).result()
        acks += 1
        print(end, flush=True)
        off += 1000
        if off > 200_000:
            bm.trim(sid, off - 50_000)


if __name__ == "__main__":
    main()
