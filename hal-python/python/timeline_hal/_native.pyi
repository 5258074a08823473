"""Type stubs of the extension module timeline_hal._native (the API timeline_hal re-exports)."""

import asyncio
from os import PathLike
from typing import Any, Callable, Dict, Generator, Iterable, List, Optional, Sequence, Tuple, Union

#: A ``waits=`` or ``signals=`` list: (semaphore, value) pairs.
SemaphoreList = Iterable[Tuple["Semaphore", int]]
#: Anything with the buffer protocol whose bytes are one contiguous run (bytes, bytearray,
#: memoryview, array.array, a C-contiguous NumPy array).
BytesLike = Any
#: Up to three ints (x, y, z), or one int (x).
Extent = Union[int, Sequence[int]]
#: A dispatch binding: a whole buffer, or (buffer, offset, length).
Binding = Union["Buffer", Tuple["Buffer", int, int]]
#: A CUDA stream: an int handle, or an object with ``__cuda_stream__()``, ``.cuda_stream``
#: (``torch.cuda.Stream``) or ``.ptr`` (``cupy.cuda.Stream``).
CudaStream = Any

def drivers() -> List[Dict[str, Any]]: ...
def devices() -> List[Dict[str, Any]]: ...
def device(path: str = "") -> Device: ...
def wait_all(pairs: SemaphoreList, timeout: Optional[float] = None) -> None: ...
def wait_any(pairs: SemaphoreList, timeout: Optional[float] = None) -> None: ...
def from_dlpack(tensor: Any, device: Device) -> Buffer: ...
def shutdown() -> None: ...

class Device:
    @property
    def driver(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def queue_count(self) -> int: ...
    @property
    def info(self) -> Dict[str, Any]: ...
    def queue(self, index: int = 0) -> Queue: ...
    def allocate(self, size: int, memory: str = "device") -> Buffer: ...
    def semaphore(self, initial: int = 0) -> Semaphore: ...
    def command_buffer(self, reusable: bool = False) -> CommandBuffer: ...
    def load_executable(
        self,
        source: Union[bytes, str, "PathLike[str]", Callable[["Invocation"], None], Sequence[Callable[["Invocation"], None]]],
        entry_points: Optional[Sequence[Dict[str, Any]]] = None,
        format: Optional[str] = None,
    ) -> Executable: ...
    def report(self) -> str: ...
    def trim(self) -> None: ...

class Buffer:
    @property
    def size(self) -> int: ...
    @property
    def memory(self) -> str: ...
    def __len__(self) -> int: ...
    def map(self, offset: int = 0, length: Optional[int] = None) -> memoryview: ...
    def read(self, offset: int = 0, length: Optional[int] = None) -> bytes: ...
    def write(self, data: BytesLike, offset: int = 0) -> None: ...
    def subspan(self, offset: int, length: int) -> Buffer: ...
    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...

class HostView:
    def __len__(self) -> int: ...

class Semaphore:
    @property
    def value(self) -> int: ...
    @property
    def failed(self) -> bool: ...
    @property
    def failure(self) -> Optional[BaseException]: ...
    def signal(self, value: int) -> None: ...
    def fail(self, message: str, code: str = "ABORTED") -> None: ...
    def wait(self, value: int, timeout: Optional[float] = None) -> None: ...
    def reach(self, value: int) -> "asyncio.Future[None]": ...
    def at(self, value: int) -> Tuple[Semaphore, int]: ...
    def report(self) -> str: ...

class Queue:
    @property
    def index(self) -> int: ...
    def fill(
        self,
        buffer: Buffer,
        value: Union[int, float, bytes],
        offset: int = 0,
        length: Optional[int] = None,
        *,
        width: int = 4,
        waits: Optional[SemaphoreList] = None,
        signals: Optional[SemaphoreList] = None,
    ) -> None: ...
    def write(
        self,
        buffer: Buffer,
        data: BytesLike,
        offset: int = 0,
        *,
        waits: Optional[SemaphoreList] = None,
        signals: Optional[SemaphoreList] = None,
    ) -> None: ...
    def read(
        self,
        buffer: Buffer,
        offset: int = 0,
        length: Optional[int] = None,
        *,
        waits: Optional[SemaphoreList] = None,
        signals: Optional[SemaphoreList] = None,
    ) -> Readback: ...
    def copy(
        self,
        source: Buffer,
        target: Buffer,
        length: Optional[int] = None,
        *,
        source_offset: int = 0,
        target_offset: int = 0,
        waits: Optional[SemaphoreList] = None,
        signals: Optional[SemaphoreList] = None,
    ) -> None: ...
    def barrier(self, *, waits: Optional[SemaphoreList] = None, signals: Optional[SemaphoreList] = None) -> None: ...
    def execute(
        self,
        command_buffer: CommandBuffer,
        *,
        waits: Optional[SemaphoreList] = None,
        signals: Optional[SemaphoreList] = None,
    ) -> None: ...
    def host_call(
        self,
        function: Any,
        *,
        waits: Optional[SemaphoreList] = None,
        signals: Optional[SemaphoreList] = None,
        non_blocking: bool = False,
    ) -> None: ...
    def alloca(
        self,
        size: int,
        memory: str = "device",
        *,
        waits: Optional[SemaphoreList] = None,
        signals: Optional[SemaphoreList] = None,
    ) -> Buffer: ...
    def dealloca(
        self,
        buffer: Buffer,
        *,
        waits: Optional[SemaphoreList] = None,
        signals: Optional[SemaphoreList] = None,
    ) -> None: ...
    def wait_stream(
        self,
        stream: CudaStream,
        *,
        waits: Optional[SemaphoreList] = None,
        signals: Optional[SemaphoreList] = None,
    ) -> None: ...
    def signal_stream(
        self,
        stream: CudaStream,
        *,
        waits: Optional[SemaphoreList] = None,
        signals: Optional[SemaphoreList] = None,
    ) -> None: ...
    def flush(self) -> None: ...

class Invocation:
    """One workgroup of a dispatch of a Python kernel (cpu-sim)."""

    @property
    def entry(self) -> str: ...
    @property
    def workgroup_id(self) -> Tuple[int, int, int]: ...
    @property
    def workgroup_count(self) -> Tuple[int, int, int]: ...
    @property
    def workgroup_size(self) -> Tuple[int, int, int]: ...
    @property
    def constants(self) -> Tuple[int, ...]: ...
    @property
    def bindings(self) -> List[memoryview]: ...

class Readback:
    @property
    def ready(self) -> bool: ...
    def wait(self, timeout: Optional[float] = None) -> bytes: ...
    def __await__(self) -> Generator[Any, None, bytes]: ...

class Executable:
    @property
    def entry_points(self) -> List[str]: ...
    def entry_point(self, name: str) -> int: ...

class CommandBuffer:
    @property
    def ended(self) -> bool: ...
    def dispatch(
        self,
        executable: Executable,
        entry: Union[str, int],
        workgroups: Extent,
        constants: Optional[Sequence[Union[int, float]]] = None,
        bindings: Optional[Sequence[Binding]] = None,
    ) -> None: ...
    def fill(
        self,
        buffer: Buffer,
        value: Union[int, float, bytes],
        offset: int = 0,
        length: Optional[int] = None,
        *,
        width: int = 4,
    ) -> None: ...
    def copy(
        self,
        source: Buffer,
        target: Buffer,
        length: Optional[int] = None,
        *,
        source_offset: int = 0,
        target_offset: int = 0,
    ) -> None: ...
    def update(self, buffer: Buffer, data: BytesLike, offset: int = 0) -> None: ...
    def barrier(self) -> None: ...
    def end(self) -> None: ...

class LoopChannel:
    def __init__(self) -> None: ...
    def fileno(self) -> int: ...
    def drain(self) -> None: ...
