# Programs above the layers (the CLI and the test programs) compile their sources in batches: one
# translation unit per KGEN_UNITY_BATCH sources (CMake's unity build). Their sources share the
# heavy header-only code (CLI11, nlohmann-json, GoogleTest), which a batch instantiates and
# optimises once instead of once per file: the CLI builds in about a third of the CPU time. The
# layers' libraries compile file by file. -DKGEN_UNITY_BUILD=OFF compiles every file on its own
# (a faster rebuild after editing one test file).
option(KGEN_UNITY_BUILD "Compile the CLI and the test programs in batches of sources" ON)
set(KGEN_UNITY_BATCH 8 CACHE STRING "Sources per batch of a unity-built program")

# kgen_unity_build(TARGET): TARGET's sources compile in batches when KGEN_UNITY_BUILD is on. The
# sources of one program must not define the same name twice at file scope (anonymous namespaces
# included): a batch is one translation unit.
function(kgen_unity_build target)
  if(KGEN_UNITY_BUILD)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${KGEN_UNITY_BATCH})
  endif()
endfunction()
