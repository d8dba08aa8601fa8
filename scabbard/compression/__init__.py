"""Lightweight per-column compression (paper §5, Table 2; docs/design.md).

``base`` holds the codec contract and the registry of codec ids that segment
headers store; ``ints``, ``varlen``, ``rle``, ``floats`` and ``generic`` hold the codecs (numba kernels
over numpy arrays, plus Snappy/LZ4 from their libraries); importing this package
registers them all.
"""

from scabbard.compression import (  # noqa: F401 (they register codecs)
    adaptive,  # noqa: F401 (it registers the adaptive scheme)
    floats,
    generic,
    ints,
    rle,
    varlen,
)
from scabbard.compression.base import (
    Codec,
    CodecError,
    Raw,
    Unfit,
    codec_class,
    codec_from_config,
    codec_from_params,
    registered,
)

__all__ = ["Codec", "CodecError", "Raw", "Unfit", "codec_class", "codec_from_config",
           "codec_from_params", "registered"]
