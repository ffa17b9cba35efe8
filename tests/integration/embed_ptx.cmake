# cmake -DIN=<ptx file> -DOUT=<header> -DNAME=<identifier> -P embed_ptx.cmake
# Writes a header defining `static const char NAME[]` = the PTX text, so a
# test program can embed nvcc's PTX output (cuModuleLoadData takes PTX text).
file(READ ${IN} ptx)
file(WRITE ${OUT} "// Generated from ${IN} by embed_ptx.cmake.\nstatic const char ${NAME}[] = R\"PTX(${ptx})PTX\";\n")
