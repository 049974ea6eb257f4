"""The run header: what a run file says about the run before its records (the JSON object under ``"run"``), typed.

``fp8bench run`` writes it as the run starts (fp8bench.measure.runner.run_header: the run's id, when it started,
the device asked for and the one used, and the environment of fp8bench.hardware.environment.capture: git, host,
device, software, flags, GPU) and again as it ends, adding ``finished_at``, ``n_records``, the final ``status``
and what the run measured of itself (``harness``, ``wall_budget``). The store keeps the same object in its
``runs.data`` column.

Headers written by older fp8bench lack the keys added since (a run killed before it ended has no ``finished_at``;
headers before host loads were recorded have no ``host.load``). Every header, from a run file of either schema or a
store, becomes a :class:`RunHeader` through one loader, :func:`load_header`, and each of its objects that readers
use is a typed part (:mod:`fp8bench.core.parts`): a key a header lacks reads as ``None``, a key no field names is
carried through, and writing a loaded header back (:meth:`RunHeader.to_json`) gives the JSON it was read from.

``settings`` stays the flat JSON object the header holds: its typed form, ``RunSettings``, belongs to the measuring
side (fp8bench.measure.settings, which imports torch), and readers of stored runs take only a few of its keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fp8bench.core.parts import Part
from fp8bench.core.records import SCHEMA_VERSION, check_schema_version


@dataclass(frozen=True)
class GitInfo(Part):
    """Where the measured code came from (fp8bench.hardware.environment.git_info); all ``None`` outside a
    checkout."""

    what: ClassVar[str] = "git"
    owner: ClassVar[str] = "run header"
    commit: str | None = None  # full hash of HEAD
    branch: str | None = None  # None on a detached HEAD
    dirty: bool | None = None  # tracked files differed from the commit
    first_parent_depth: int | None = None  # commits on the first-parent line up to HEAD (None: a shallow clone)
    commit_time: str | None = None  # the commit's committer date, ISO 8601
    remote: str | None = None  # the web address of ``origin``, credentials removed


@dataclass(frozen=True)
class HostInfo(Part):
    """The machine the run measured on."""

    what: ClassVar[str] = "host"
    owner: ClassVar[str] = "run header"
    alias: str | None = None  # a stable, anonymous name of the host (fp8bench.core.redact)
    os: str | None = None  # platform.platform()
    cpu_model: str | None = None
    logical_cpus: int | None = None
    load: dict[str, object] | None = None  # the load as the run started (fp8bench.core.noise.HostLoad)


@dataclass(frozen=True)
class DeviceInfo(Part):
    """The device measured on (fp8bench.hardware.environment.device_properties): a CPU's threads, a GPU's
    properties as torch reports them."""

    what: ClassVar[str] = "device"
    owner: ClassVar[str] = "run header"
    name: str | None = None  # the device's marketing name (a CPU: its model)
    kind: str | None = None  # "cpu" | "cuda"
    index: int | None = None  # the CUDA device index
    compute_capability: str | None = None  # "9.0"
    sm_count: int | None = None
    total_memory_bytes: int | None = None
    l2_cache_bytes: int | None = None
    uuid: str | None = None
    device_count: int | None = None  # CUDA devices visible to the run
    threads: int | None = None  # a CPU: torch's intra-op threads
    interop_threads: int | None = None
    logical_cpus: int | None = None
    machine: str | None = None  # platform.machine()
    mkldnn: bool | None = None  # whether oneDNN was available


@dataclass(frozen=True)
class SoftwareVersions(Part):
    """Versions of what ran the cases; ``None`` for a library that was not installed."""

    what: ClassVar[str] = "software"
    owner: ClassVar[str] = "run header"
    python: str | None = None
    torch: str | None = None
    torch_git: str | None = None  # the commit torch was built from
    cuda_runtime: str | None = None  # the CUDA runtime torch was built with
    hip: str | None = None
    cudnn: int | None = None
    cuda_compiled_version: str | None = None
    triton: str | None = None
    transformer_engine: str | None = None
    torchao: str | None = None
    numpy: str | None = None
    fp8bench: str | None = None


@dataclass(frozen=True)
class GpuEnvironment(Part):
    """The GPU as NVML saw it (fp8bench.hardware.environment.gpu_environment): ``available`` false and a
    ``reason`` on a CPU run."""

    what: ClassVar[str] = "gpu"
    owner: ClassVar[str] = "run header"
    available: bool | None = None
    reason: str | None = None  # why no GPU is described
    name: str | None = None
    uuid: str | None = None  # NVML's GPU-... spelling
    driver_version: str | None = None  # "550.54.15"
    cuda_driver_version: str | int | None = None  # the CUDA version the driver supports
    power_limit_w: float | None = None  # W, the configured limit
    enforced_power_limit_w: float | None = None  # W, the limit in force
    cuda_runtime_version: str | None = None
    nvidia_smi_q: str | None = None  # the raw ``nvidia-smi -q`` report
    clock_policy: str | None = None  # fp8bench.hardware.environment.clock_policy
    gpu_count: int | None = None
    topology: dict[str, object] | None = None  # links to the other GPUs
    nvml_error: str | None = None  # why NVML could not be read


# The header's keys that hold a typed part, and the part.
HEADER_PARTS: dict[str, type[Part]] = {"git": GitInfo, "host": HostInfo, "device": DeviceInfo,
                                       "software": SoftwareVersions, "gpu": GpuEnvironment}


@dataclass(frozen=True)
class RunHeader(Part):
    """A run's header (see the module docstring). Fields a stored header was written without read as ``None`` or
    as an empty part, and are left out again when it is written back."""

    what: ClassVar[str] = "run"
    owner: ClassVar[str] = "run file"
    nested: ClassVar[tuple[str, ...]] = tuple(HEADER_PARTS)
    run_id: str | None = None
    started_at: str | None = None  # ISO 8601, UTC
    status: str | None = None  # running | complete | interrupted | failed: ... (as the run ended; running if it died)
    device_spec: str | None = None  # the device measured on ("cpu", "cuda:0")
    requested_device: str | None = None  # what --device asked for ("auto")
    git: GitInfo = field(default_factory=GitInfo)
    host: HostInfo = field(default_factory=HostInfo)
    device: DeviceInfo = field(default_factory=DeviceInfo)
    software: SoftwareVersions = field(default_factory=SoftwareVersions)
    env: dict[str, str] | None = None  # environment variables that change what runs
    flags: dict[str, object] | None = None  # torch's numerics flags (TF32, determinism)
    gpu: GpuEnvironment = field(default_factory=GpuEnvironment)
    settings: dict[str, Any] | None = None  # RunSettings.to_header (fp8bench.measure.settings), flat
    spec: dict[str, Any] | None = None  # what was asked for: suite, entries; ``distributed`` under torchrun
    energy_method: str | None = None  # the meter the device offers (fp8bench.energy.meters)
    clock_lock: dict[str, object] | None = None  # --lock-clocks: the clocks locked
    wall_budget: dict[str, object] | None = None  # --wall-budget: the budget and how it was spent
    finished_at: str | None = None  # ISO 8601, UTC; None while running, or for a run that died
    n_records: int | None = None  # records kept
    n_cases: int | None = None  # cases planned
    harness: dict[str, object] | None = None  # the harness's own cost of the run (fp8bench.measure.harness_cost)

    def __post_init__(self) -> None:
        # A nested object given as its stored JSON becomes its typed part (a wrong type is refused by name).
        for name in self.nested:
            part = HEADER_PARTS[name]
            value = getattr(self, name)
            if not isinstance(value, part):
                object.__setattr__(self, name, part.from_json(value))

    def setting(self, name: str) -> Any:
        """One run setting as the header holds it (``RunSettings.to_header``'s key ``name``); ``None`` where the
        header has no settings or was written before that setting existed."""
        return None if self.settings is None else self.settings.get(name)

    @property
    def distributed(self) -> Mapping[str, Any]:
        """How the ranks of a run under torchrun were laid out (``spec.distributed``: world_size, ranks_per_node,
        backend, launcher); empty for a run of one process."""
        value = (self.spec or {}).get("distributed")
        return value if isinstance(value, Mapping) else {}

    @property
    def world_size(self) -> int:
        """Ranks that measured the run's records (1 unless it ran under torchrun)."""
        value = self.distributed.get("world_size")
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 1 else 1

    @property
    def ranks_per_node(self) -> int | None:
        """Ranks on each node of a run under torchrun (torchrun's LOCAL_WORLD_SIZE), ``None`` where not recorded."""
        value = self.distributed.get("ranks_per_node")
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None

    @property
    def finished(self) -> bool:
        """Whether the run wrote its final header (a run killed mid-way never did)."""
        return self.finished_at is not None


# How a header of each run-file schema becomes one of the next. Schema 2 changed the file's layout (JSON Lines),
# not its header: a header of schema 1 is one of schema 2 as it stands. A schema that changes what a header holds
# adds its step here, and every reader gets it through :func:`load_header`.
_UPGRADES: dict[int, Callable[[Mapping[str, Any]], Mapping[str, Any]]] = {1: lambda header: header}


def load_header(data: Mapping[str, Any], schema_version: int = SCHEMA_VERSION) -> RunHeader:
    """The typed header of a stored one: the ``"run"`` object of a run file of ``schema_version`` (1 or 2), or the
    ``runs.data`` of a store row (with the row's ``schema_version``). Keys it was written without read as ``None``
    (or an empty part), keys no field names are carried through (``RunHeader.other``), and
    :meth:`RunHeader.to_json` writes back the same JSON. A schema newer than this fp8bench reads is refused by
    name, as is a header that is no object or a nested object of the wrong type."""
    for version in range(check_schema_version(schema_version, "run header"), SCHEMA_VERSION):
        data = _UPGRADES[version](data)
    if not isinstance(data, Mapping):
        raise ValueError(f"run header is {type(data).__name__} {str(data)[:40]!r}; accepted: an object (keys "
                         f"{', '.join(RunHeader.names())})")
    return RunHeader.from_json(data)


def payload_header(payload: Mapping[str, Any]) -> RunHeader:
    """The typed header of a run file's content (``{"schema_version": ..., "run": {...}, "records": ...}``, as
    fp8bench.results.runfile reads it and a store's ``run_payload`` gives it); a payload without a schema version
    is of this one."""
    return load_header(payload["run"], payload.get("schema_version") or SCHEMA_VERSION)


def stored_schema_version(value: float | None) -> int:
    """The run-file schema a store's ``runs.schema_version`` holds for a run (any integer type a data frame gives
    it as); :data:`SCHEMA_VERSION` where it is null (a run added, not ingested from a file, by an older fp8bench)."""
    if value is None or value != value:  # null, or NaN in a data frame's column
        return SCHEMA_VERSION
    return check_schema_version(int(value) if float(value).is_integer() else value, "run header")


def header_of(run: RunHeader | Mapping[str, Any] | None) -> RunHeader:
    """``run`` as a typed header: a header's JSON object (of this schema) loaded, ``None`` read as an empty one;
    for readers that are given either."""
    if isinstance(run, RunHeader):
        return run
    return load_header(run or {})
