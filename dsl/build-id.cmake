# Writes TesselBuildId.h: a hash of the sources that decide what the
# pipeline makes of a program (listed in INPUTS, one per line), so that the
# compile cache misses after any change to them.
file(STRINGS ${INPUTS} files)
set(all "")
foreach(f IN LISTS files)
  file(SHA256 ${f} h)
  string(APPEND all "${h}\n")
endforeach()
string(SHA256 id "${all}")
file(WRITE ${OUT} "#define TESSEL_BUILD_ID \"${id}\"\n")
