"""Errors a user can fix. One class per kind of problem, each with its own exit code.

The CLI prints these without a traceback (``-v`` shows it) and exits with ``exit_code``.
Anything that is not an ``EdgebuildError`` is a bug and is not caught.
"""

from typing import Optional


class EdgebuildError(Exception):
    """Base of every user-facing error."""

    exit_code = 1
    #: one word for the kind of problem, printed before the message
    kind = "error"

    def __init__(self, message: str, *, hint: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\n  hint: {self.hint}"
        return self.message


class ConfigError(EdgebuildError):
    """The project file is missing, not valid TOML, or fails validation."""

    exit_code = 3
    kind = "config error"


class TargetError(EdgebuildError):
    """An unknown target, module or JetPack release, or a pairing that does not exist."""

    exit_code = 4
    kind = "target error"


class DataError(EdgebuildError):
    """Calibration or validation data is missing or malformed."""

    exit_code = 5
    kind = "data error"


class ModelError(EdgebuildError):
    """The model entry point, its weights, or its forward pass failed."""

    exit_code = 6
    kind = "model error"


class ProfileDataError(EdgebuildError):
    """A file under profiles/ is broken: this is a problem of the installation, not the project."""

    exit_code = 7
    kind = "profile data error"


class ExportError(EdgebuildError):
    """ONNX export failed, the ONNX file is invalid, or it does not match PyTorch."""

    exit_code = 8
    kind = "export error"


class PreflightError(EdgebuildError):
    """A target's TensorRT cannot parse or build some operator of the model."""

    exit_code = 9
    kind = "preflight"


class AccuracyGateError(EdgebuildError):
    """No precision candidate keeps enough of the FP32 accuracy."""

    exit_code = 11
    kind = "accuracy gate"


class CapabilityMissing(EdgebuildError):
    """This host lacks something the requested work needs (TensorRT, a GPU, podman, ...)."""

    exit_code = 10
    kind = "not available here"


class RemoteError(EdgebuildError):
    """A device reached over SSH could not be reached, or a file transfer or a command on it failed."""

    exit_code = 12
    kind = "remote device"


class DeviceUnreachable(RemoteError):
    """ssh could not reach the device, or lost it mid-command (ssh exit 255)."""


class LimitError(EdgebuildError):
    """A resource limit was refused by the host or broken by the workload (an OOM kill, an engine too large)."""

    exit_code = 13
    kind = "resource limit"


class ContainerError(EdgebuildError):
    """A container image build or a container run failed."""

    exit_code = 14
    kind = "container"


class BundleError(EdgebuildError):
    """An OTA bundle that must not be installed: bad signature, tampered or unsafe content, wrong device."""

    exit_code = 15
    kind = "bundle rejected"


class BuildLocked(EdgebuildError):
    """Another edgebuild is building the same project (the build folder is locked)."""

    exit_code = 16
    kind = "build folder busy"


class LatencyBudgetError(EdgebuildError):
    """A fleet group's latency budget is missed by every candidate's predicted latency, beyond its error band."""

    exit_code = 17
    kind = "latency budget"


#: exit codes documented in the README and `edgebuild --help`
EXIT_CODES = {
    0: "success",
    1: "other edgebuild error",
    2: "bad command-line usage",
    3: ConfigError.__doc__ or "",
    4: TargetError.__doc__ or "",
    5: DataError.__doc__ or "",
    6: ModelError.__doc__ or "",
    7: ProfileDataError.__doc__ or "",
    8: ExportError.__doc__ or "",
    9: PreflightError.__doc__ or "",
    10: CapabilityMissing.__doc__ or "",
    11: AccuracyGateError.__doc__ or "",
    12: RemoteError.__doc__ or "",
    13: LimitError.__doc__ or "",
    14: ContainerError.__doc__ or "",
    15: BundleError.__doc__ or "",
    16: BuildLocked.__doc__ or "",
    17: LatencyBudgetError.__doc__ or "",
}
