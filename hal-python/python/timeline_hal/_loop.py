"""One LoopChannel per asyncio event loop: the socket HAL threads wake the loop through."""

import asyncio
import weakref

from ._native import LoopChannel

_channels: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopChannel]" = weakref.WeakKeyDictionary()


def channel(loop: asyncio.AbstractEventLoop) -> LoopChannel:
    """The loop's channel, made and registered as a reader of the loop at first use. The loop
    must support ``add_reader`` (every selector loop, uvloop)."""
    found = _channels.get(loop)
    if found is None:
        found = LoopChannel()
        loop.add_reader(found.fileno(), found.drain)
        _channels[loop] = found
    return found
