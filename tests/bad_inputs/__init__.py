"""Bad inputs as a new user brings them: each case breaks one valid input and says who must refuse it.

A case (``Case``) starts from the kit of valid inputs (``tests.bad_inputs.kit.Kit``: a classifier and
a detector ONNX, their datasets in every format), breaks one thing, and runs what a user runs:
``edgebuild init --model M --data D DIR``, then ``edgebuild check -p DIR``, then (for the few that
only the export can find) ``edgebuild validate -p DIR``. It names the step that must refuse, the
exit code, and what the message must name (a file, a key, an id). A case refused by nobody but
worth saying (``step="note"``) names what the output must say. No step may print a traceback.

Cases live by area: ``model_cases.py`` (model files), ``data_cases.py`` (YOLO, COCO, VOC, class
folders), ``project_cases.py`` (keys of edgebuild.toml), ``baseline_cases.py`` (a wrong FP32).
``tests/integration/test_bad_inputs.py`` runs them all.
"""
