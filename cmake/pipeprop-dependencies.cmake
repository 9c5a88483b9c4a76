# Finds pipeprop's dependencies (all from Debian 12 packages; see scripts/install-deps.sh).
# Used by the build tree and, through find_dependency, by the installed package config.
include(CMakeFindDependencyMacro)
find_dependency(xtl)
find_dependency(xtensor)
find_dependency(xsimd)
find_dependency(TBB)
find_dependency(Boost 1.74)
find_dependency(ZLIB)
set(BLA_VENDOR OpenBLAS)
find_dependency(BLAS)
