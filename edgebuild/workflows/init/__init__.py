"""``edgebuild init``: a complete project file from a model and a dataset.

``project_file`` (``init_from_files``) writes it from what the model says and what the dataset says
(``dataset``); ``torch_model`` reads a TorchScript file or a torchvision/timm name; ``preprocess``
measures the preprocessing where the model file says none.
"""
