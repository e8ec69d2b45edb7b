"""Build-time code: nothing the run time imports depends on this package.

- ``matrix``: arch_matrix.toml, loaded and validated;
- ``plan``: the matrix filtered for one build and expanded into what CMake compiles (the
  generated parameter headers and instantiation lists, plan.cmake, plan.json);
- ``symbols``: the kernels inside a fatbin image, for the per-image kernel check;
- ``manifest_writer``: each fatbin checked against the plan, and manifest.json written.

The build imports these modules from the source tree (tools/build_plan.py,
tools/write_manifest.py); the installed package imports them only for ``aotkernels matrix``.
"""
