"""Write the public API of the importable ``tensorrt`` module as a tensorrt-api listing (JSON on stdout).

How ``tensorrt-11.4.0.106.json`` was made (and how ``tensorrt-10.3.0.json`` is reproduced exactly,
every introspected key), without a GPU or TensorRT's libraries:

1. ``pip download --no-deps tensorrt-cu13-bindings==11.4.0.106`` and unzip it;
2. copy ``tensorrt_bindings/{tensorrt.so,__init__.py}`` into a folder named ``tensorrt`` (so type
   names read ``tensorrt.tensorrt.X`` as in the 8.5 listing);
3. build stand-ins for the libraries the module links (``libnvinfer.so.11``,
   ``libnvinfer_plugin.so.11``, ``libnvonnxparser.so.11``) with gcc, each exporting the symbols
   ``nm -D --undefined-only tensorrt.so`` names (``createInferBuilder_INTERNAL`` ...), all returning 0;
4. ``PYTHONPATH=<parent of that folder> LD_LIBRARY_PATH=<stubs> python introspect_tensorrt.py``.

Introspection only: no TensorRT object is constructed. The provenance fields (``provenance``,
``python``, ``name_aliases``, ``requested_missing``) are added by hand afterwards.
"""

import inspect
import json
import sys

import tensorrt as trt


def first_doc_line(obj):
    doc = getattr(obj, "__doc__", None)
    return doc.strip().splitlines()[0].strip() if isinstance(doc, str) and doc.strip() else ""


def is_enum(value):
    return isinstance(value, type) and isinstance(getattr(value, "__members__", None), dict)


def kind_of(value):
    if inspect.ismodule(value):
        return "module"
    if isinstance(value, type):
        return "enum" if is_enum(value) else "class"
    return "function" if callable(value) else "value:" + type(value).__name__


def members_of(cls, owner, enums):
    info = {}
    for name in sorted(m for m in dir(cls) if not m.startswith("_")):
        raw, value = inspect.getattr_static(cls, name), getattr(cls, name)
        if isinstance(raw, property):
            info[name] = {"doc1": first_doc_line(raw), "kind": "property"}
        elif isinstance(value, type):
            info[name] = {"doc1": first_doc_line(value), "kind": "class"}
            if is_enum(value):
                enums[f"{owner}.{name}"] = {k: int(v) for k, v in value.__members__.items()}
        elif callable(value):
            info[name] = {"doc1": first_doc_line(value), "kind": "method"}
        else:
            info[name] = {"doc1": "", "kind": "attribute", "value_repr": repr(value)}
    return info


def listing():
    native = getattr(trt, "tensorrt", trt)
    names = sorted(n for n in dir(trt) if not n.startswith("_"))
    kinds = {n: kind_of(getattr(trt, n)) for n in names}
    classes, details, enums = {}, {}, {}
    for name in names:
        value = getattr(trt, name)
        if kinds[name] == "enum":
            enums[name] = {k: int(v) for k, v in value.__members__.items()}
        elif kinds[name] == "class":
            details[name] = members_of(value, name, enums)
            classes[name] = sorted(details[name])
    return {
        "class_members_detail": details,
        "classes": classes,
        "enums": enums,
        "tensorrt_version": trt.__version__,
        "top_level_functions_doc1": {n: first_doc_line(getattr(trt, n)) for n in names if kinds[n] == "function"},
        "top_level_kinds": kinds,
        "top_level_names": names,
        "top_level_names_native": sorted(n for n in dir(native) if not n.startswith("_")),
    }


if __name__ == "__main__":
    json.dump(listing(), sys.stdout, indent=1, sort_keys=True)
