"""One input read by its reader, with anything unexpected the reader raises turned into one line
naming the file; and the rank / world size a trace claims, checked before anything is sized by them."""
from __future__ import annotations

import warnings

from ..errors import DiagnoserError, InputError, unexpected_problem
from ..input_family import Reader
from ..ingest.sniff import display_kind

# Largest distributed run a trace may claim to be part of (the biggest jobs run ~1e5 GPUs): a
# larger distributedInfo.world_size is a corrupt claim, never a size to allocate for.
MAX_WORLD_SIZE = 1 << 20


def read_with(reader: Reader, path, progress: bool = False):
    """Run `reader` on `path`; anything unexpected it raises still names the file, on one line.

    numpy's RuntimeWarnings (overflow, invalid casts) are errors here: a value a reader cannot
    represent is bad input, not terminal noise.
    """
    kind = reader.kind
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            return reader.read(path, progress=progress)
    except DiagnoserError:
        raise
    except RecursionError:
        raise InputError(path, f"nested too deeply to be a {display_kind(kind)}") from None
    except MemoryError:
        from ..limits import memory_limit_text
        raise InputError(path, f"ran out of memory while reading ({memory_limit_text()})") from None
    except RuntimeWarning as e:
        raise InputError(path, f"holds a value out of range for a {display_kind(kind)} ({e})") from None
    except Exception as e:  # noqa: BLE001 - a reader bug or an input shape nobody foresaw
        raise InputError(path, f"could not be read as a {display_kind(kind)}: it {unexpected_problem(e)}") from None


def check_ranks(path, model) -> None:
    """rank / world_size come from the file: check them before anything is sized by them."""
    world, rank = model.world_size, model.rank
    if world is not None and not 0 < world <= MAX_WORLD_SIZE:
        raise InputError(path, f"distributedInfo.world_size {world} is not a plausible number of ranks "
                               f"(1 to {MAX_WORLD_SIZE:,})")
    if rank is not None and world and not 0 <= rank < world:
        raise InputError(path, f"distributedInfo.rank {rank} is outside world_size {world}")
