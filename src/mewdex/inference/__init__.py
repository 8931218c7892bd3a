"""The local models every service runs (ONNX through onnxruntime, no network): the text embedders
(:mod:`.embedders`), the OCR engine (:mod:`.ocr`), the visual model (:mod:`.visual_model`, its
weights in ``assets/``), the process-wide registry that loads them once (:mod:`.models`) and
:class:`~.errors.BackendUnavailable`. Used by the image pipeline (to analyse images) and by search
(to embed queries); imports no service above it."""
