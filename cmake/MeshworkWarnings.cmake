# Warnings live on an INTERFACE target that every meshwork target links PRIVATE,
# so that third-party code and consumers are not affected.
include_guard(GLOBAL)

add_library(meshwork_warnings INTERFACE)
add_library(meshwork::warnings ALIAS meshwork_warnings)
target_compile_options(meshwork_warnings INTERFACE
  $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion
    -Wno-sign-conversion -Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual
    -Wimplicit-fallthrough>
  # GCC 12 reports std::string concatenation at -O2 as overlapping memcpy (GCC bug 105329):
  # a false positive in libstdc++, not in our code.
  $<$<AND:$<COMPILE_LANG_AND_ID:CXX,GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>>:-Wno-restrict>
)
if(MESHWORK_WERROR)
  target_compile_options(meshwork_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
