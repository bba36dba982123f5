"""NVIDIA Tilus's ``tilus.hidet`` import paths (its embedded compiler), kept for the names its
kernels import: ``tilus.hidet.ir.DataType``, ``tilus.hidet.ir.dtypes.*``,
``tilus.hidet.ir.type.{DataType, void_p}``. They are tilus's own objects."""
