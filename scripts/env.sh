# Sourced by weft's scripts: lets OpenMPI run as root (CI runs as root) and place
# more ranks than cores (4 ranks on a 2-core machine).
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# The same for Open MPI 5 (the ft preset's, .venv-ft): its launcher, PRRTE, reads only this one.
export PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
jobs=$(nproc 2>/dev/null || echo 2)
