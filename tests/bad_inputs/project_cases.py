"""Keys of edgebuild.toml a user gets wrong after ``init`` wrote a valid project: syntax, table shapes,
typos, values, paths. Each is refused by ``check`` naming the key (and the line for a TOML syntax
error); a bad ``init`` flag is refused by ``init`` naming the flag."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.bad_inputs.harness import Case, Inputs, invoke
from tests.bad_inputs.harness import substitute as _sub
from tests.bad_inputs.kit import Kit


def _edit(edit: Callable[[str], str], of: str = "classifier",
          also: Callable[[Path], None] | None = None) -> Callable[[Kit, Path], Inputs]:
    """init on a copy of the kit's model and data, then its edgebuild.toml edited (and ``also(project)`` run)."""
    def make(kit: Kit, folder: Path) -> Inputs:
        model = kit.copy(getattr(kit, of), folder)
        data = kit.copy(kit.folders if of == "classifier" else kit.yolo, folder)
        project = folder / "project"
        ran = invoke("init", "--model", str(model), "--data", str(data), str(project))
        assert ran.exit_code == 0, ran.output
        toml = project / "edgebuild.toml"
        toml.write_text(edit(toml.read_text(encoding="utf-8")), encoding="utf-8")
        if also:
            also(project)
        return Inputs(project=project)
    return make


def _append(extra: str) -> Callable[[str], str]:
    return lambda text: text + extra


def _flag(*args: str) -> Callable[[Kit, Path], Inputs]:
    return lambda kit, folder: Inputs(model=kit.classifier, data=kit.folders, init_args=args)


def _file_at(name: str) -> Callable[[Path], None]:
    return lambda project: (project / name).write_text("not a folder")


CASES: list[Case] = [
    # -- TOML syntax: the line ---------------------------------------------------------------------------
    Case("project-toml-double-equals", _edit(_sub(r"^port = 8000", "port = = 8000")), "check", 3,
         ("edgebuild.toml", "line ", "port = = 8000")),
    Case("project-toml-unterminated-string", _edit(_sub(r'^name = "project"', 'name = "project')), "check", 3,
         ("edgebuild.toml", "line 6", "not valid toml")),
    Case("project-toml-key-twice", _edit(_sub(r"^port = 8000", "port = 8000\nport = 8001")), "check", 3,
         ("edgebuild.toml", "port = 8001", "written twice")),
    Case("project-toml-table-twice", _edit(_append("\n[runtime]\nport = 1\n")), "check", 3,
         ("edgebuild.toml", "[runtime]", "written twice")),
    Case("project-not-utf8", _edit(lambda t: t, also=lambda p: (p / "edgebuild.toml").write_bytes(
        b"\xff\xfe" + (p / "edgebuild.toml").read_bytes())), "check", 3, ("edgebuild.toml", "utf-8")),
    Case("project-empty-file", _edit(lambda t: ""), "check", 3, ("edgebuild.toml", "project", "fleet", "required")),
    # -- table shapes --------------------------------------------------------------------------------------
    Case("project-fleet-single-brackets", _edit(_sub(r"^\[\[fleet\]\]", "[fleet]")), "check", 3,
         ("fleet", "[[fleet]]", "two pairs of brackets")),
    Case("project-every-group-single-brackets",
         lambda kit, folder: _two_groups(kit, folder), "check", 3, ("line 6", "[[fleet]]", "one per device group")),
    Case("project-inputs-single-brackets", _edit(_sub(r"^\[\[model\.inputs\]\]", "[model.inputs]")), "check", 3,
         ("model.inputs", "[[model.inputs]]")),
    Case("project-task-double-brackets", _edit(_sub(r"^\[task\]", "[[task]]")), "check", 3,
         ("task", "[task]", "one pair")),
    Case("project-no-fleet", _edit(lambda t: t[:t.index("[[fleet]]")] + t[t.index("[runtime]"):]), "check", 3,
         ("fleet", "required")),
    # -- unknown keys: the key and a close match ---------------------------------------------------------
    Case("project-typo-key", _edit(_sub(r"^min_retention", "min_retension")), "check", 3,
         ("accuracy.min_retension", "did you mean 'min_retention'")),
    Case("project-typo-table", _edit(_sub(r"^\[runtime\]", "[runtim]")), "check", 3,
         ("runtim", "did you mean 'runtime'")),
    Case("project-typo-fleet-key", _edit(_sub(r'^jetpack = "(.*)"', r'jetpak = "\1"')), "check", 3,
         ("fleet[0].jetpak", "did you mean 'jetpack'")),
    Case("project-key-above-tables", _edit(lambda t: 'build_dir = "out"\n' + t), "check", 3,
         ("build_dir", "[project]")),
    # -- values ------------------------------------------------------------------------------------------
    Case("project-port-a-string", _edit(_sub(r"^port = 8000", 'port = "eight"')), "check", 3,
         ("runtime.port", "eight")),
    Case("project-retention-above-1", _edit(_sub(r"^min_retention = 0.92", "min_retention = 1.5")), "check", 3,
         ("accuracy.min_retention", "1.5")),
    Case("project-unknown-jetpack", _edit(_sub(r'^jetpack = "(.*)"', 'jetpack = "9.9"')), "check", 3,
         ("fleet[0].jetpack", "9.9")),
    Case("project-unknown-module", _edit(_sub(r'^module = "(.*)"', 'module = "orin-nano"')), "check", 3,
         ("fleet[0].module", "orin-nano")),
    Case("project-dla-on-orin-nano", _edit(_sub(r'^(jetpack = .*)$', r'\1\nuse_dla = true')), "check", 3,
         ("fleet[0].use_dla",)),
    Case("project-name-upper-case", _edit(_sub(r'^name = "project"', 'name = "My Project"')), "check", 3,
         ("project.name",)),
    Case("project-mean-length", _edit(_sub(r"^mean = .*", "mean = [0.5, 0.5]")), "check", 3,
         ("task.preprocess", "mean")),
    Case("project-std-zero", _edit(_sub(r"^std = .*", "std = [0.0, 1.0, 1.0]")), "check", 3,
         ("task.preprocess", "std")),
    Case("project-resize-unknown", _edit(_sub(r'^resize = "resize"', 'resize = "crop"')), "check", 3,
         ("task.preprocess.resize", "crop")),
    Case("project-metric-of-detection", _edit(_sub(r'^metric = "top-1"', 'metric = "mAP50"')), "check", 3,
         ("accuracy.metric", "mAP50")),
    Case("project-task-kind-unknown", _edit(_sub(r'^kind = "classification"', 'kind = "depth"')), "check", 3,
         ("task", "depth")),
    Case("project-model-kind-unknown", _edit(_sub(r"^\[model\]", '[model]\nkind = "tensorflow"')), "check", 3,
         ("model.kind", "tensorflow")),
    Case("project-logits-output-not-an-output", _edit(_sub(r'^logits_output = "logits"', 'logits_output = "logit"')),
         "check", 3, ("task.postprocess.logits_output", "logit")),
    Case("project-outputs-a-string", _edit(_sub(r'^outputs = \["logits"\]', 'outputs = "logits"')), "check", 3,
         ("model.outputs", "valid list")),
    Case("project-source-and-entry-point", _edit(_sub(r"^\[model\]", '[model]\nentry_point = "net:build"')),
         "check", 3, ("model", "entry_point", "source")),
    Case("project-ota-version", _edit(_sub(r'^version = "0.1.0"', 'version = "one"')), "check", 3,
         ("ota.version", "one")),
    Case("project-calibrate-on-validation", _edit(_sub(r'^calibration_split = "train"', 'calibration_split = "val"')),
         "check", 3, ("data.calibration_split",)),
    Case("project-max-batch-above-profile", _edit(_sub(r"^\[runtime\]", "[runtime]\nmax_batch_size = 8")), "check", 3,
         ("runtime.max_batch_size", "max_shape")),
    Case("project-fleet-group-twice", _edit(_sub(r"^\[runtime\]", '[[fleet]]\nname = "orin"\n'
                                                 'module = "orin-nano-8gb"\njetpack = "6.2"\n\n[runtime]')),
         "check", 3, ("fleet[1].name", "duplicate")),
    # -- paths ---------------------------------------------------------------------------------------------
    Case("project-build-dir-a-file", _edit(_sub(r'^build_dir = "build"', 'build_dir = "build.txt"'),
                                           also=_file_at("build.txt")), "check", 3,
         ("project.build_dir", "build.txt", "is a file")),
    Case("project-build-dir-under-a-file", _edit(_sub(r'^build_dir = "build"', 'build_dir = "notes/build"'),
                                                 also=_file_at("notes")), "check", 3,
         ("project.build_dir", "notes", "is a file")),
    Case("project-source-missing", _edit(_sub(r'^source = ".*"', 'source = "gone.onnx"')), "check", 3,
         ("model.source", "gone.onnx", "does not exist")),
    Case("project-dataset-missing", _edit(_sub(r'^dataset = ".*"', 'dataset = "nowhere"')), "check", 3,
         ("data.dataset", "nowhere")),
    Case("project-dataset-a-file-said-folders",
         _edit(_sub(r'^dataset = ".*"', 'dataset = "labels.txt"\nformat = "folders"'), also=_file_at("labels.txt")),
         "check", 5, ("data.dataset", "labels.txt", "a file")),
    Case("project-signing-key-missing", _edit(_sub(r'^# signing_key = .*', 'signing_key = "keys/ota.pem"')), "check",
         3, ("ota.signing_key", "ota.pem")),
    Case("project-a-folder-as-project-file", lambda kit, folder: Inputs(project=_folder_as_file(folder)), "check", 3,
         ("edgebuild.toml", "folder")),
    Case("project-bom-is-read", _edit(lambda t: "\ufeff" + t), "note", 0, ("valid",)),
    # -- review of issue 34: values that read as something else, a build folder that is not one of its own --
    Case("project2-retention-bool", _edit(_sub(r"^min_retention = 0.92", "min_retention = true")), "check", 3,
         ("accuracy.min_retention", "boolean")),
    Case("project2-build-dir-root", _edit(_sub(r'^build_dir = "build"', 'build_dir = "/"')), "check", 3,
         ("project.build_dir", "filesystem root")),
    Case("project2-build-dir-empty", _edit(_sub(r'^build_dir = "build"', 'build_dir = ""')), "check", 3,
         ("project.build_dir", "project folder")),
    Case("project2-build-dir-dot", _edit(_sub(r'^build_dir = "build"', 'build_dir = "."')), "check", 3,
         ("project.build_dir", "project folder itself")),
    Case("project2-build-dir-parent", _edit(_sub(r'^build_dir = "build"', 'build_dir = ".."')), "check", 3,
         ("project.build_dir", "a parent of the project folder")),
    Case("project2-shapes-channels-last", _edit(lambda t: t.replace("3, 32, 32]", "32, 32, 3]")), "check", 3,
         ("model.inputs[0]", "channels-last", "NHWC")),
    Case("project2-metric-top-5-three-classes", _edit(_sub(r'^metric = "top-1"', 'metric = "top-5"')), "check", 3,
         ("accuracy.metric", "top-5", "3 classes", "task.classes")),
    # -- init flags ----------------------------------------------------------------------------------------
    Case("project-init-fleet-flag", _flag("--fleet", "orin-nano-8gb@6.2"), "init", 3, ("--fleet",)),
    Case("project-init-fleet-unknown-module", _flag("--fleet", "yard=orin-nanoo@6.2"), "init", 4, ("orin-nanoo",)),
    Case("project-init-input-size-vs-fixed", _flag("--input-size", "64"), "init", 3, ("--input-size", "32x32")),
    Case("project-init-weights-with-file", _flag("--weights", "w.pth"), "init", 3, ("--weights",)),
]


def _folder_as_file(folder: Path) -> Path:
    project = folder / "project"
    (project / "edgebuild.toml").mkdir(parents=True)
    return project


def _two_groups(kit: Kit, folder: Path) -> Inputs:
    """Two fleet groups, each written [fleet]: TOML itself refuses the second table."""
    inputs = _edit(lambda t: t)(kit, folder)
    toml = inputs.project / "edgebuild.toml"
    text = toml.read_text()
    fleet = text.index("[[fleet]]")
    toml.write_text('[fleet]\nname = "a"\nmodule = "orin-nano-8gb"\njetpack = "6.2"\n\n'
                    '[fleet]\nname = "b"\nmodule = "orin-nano-8gb"\njetpack = "6.2"\n\n'
                    + text[:fleet] + text[text.index("[runtime]"):])
    return inputs
