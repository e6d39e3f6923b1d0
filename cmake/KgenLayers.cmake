# kgen's layers, each a folder and a static library that sees only its own headers and those of
# the layers it may depend on. Includes name a layer's folder and a file in it ("jit/warm.h"), so
# each layer compiles against a view: a directory in the build tree holding links to exactly the
# folders it may include (its own, its dependencies' views, the public include/ tree). A header
# outside the view fails to build (tests/layers checks that it does).
#
# The view is the only include root of a layer. The host runtime's layers live under runtime/
# (runtime/jit/warm.h is included as "jit/warm.h"); neither the project root nor runtime/ is on
# any include path, so a repository path such as "runtime/ops/..." cannot reach around a view.

set(KGEN_VIEWS_DIR ${PROJECT_BINARY_DIR}/include-views)

# Folders a view may name, and where they are in the source tree.
set(KGEN_FOLDER_kgen_device ${PROJECT_SOURCE_DIR}/templates/kgen_device)
foreach(folder base compiler driver jit tuning ops)
  set(KGEN_FOLDER_${folder} ${PROJECT_SOURCE_DIR}/runtime/${folder})
endforeach()
foreach(folder cache generator check tools tests)
  set(KGEN_FOLDER_${folder} ${PROJECT_SOURCE_DIR}/${folder})
endforeach()

# kgen_make_view(NAME FOLDERS...): ${KGEN_VIEWS_DIR}/NAME with one link per folder.
function(kgen_make_view name)
  set(dir ${KGEN_VIEWS_DIR}/${name})
  file(REMOVE_RECURSE ${dir})
  file(MAKE_DIRECTORY ${dir})
  foreach(folder IN LISTS ARGN)
    if(NOT DEFINED KGEN_FOLDER_${folder})
      message(FATAL_ERROR "kgen_make_view: unknown folder '${folder}'")
    endif()
    file(CREATE_LINK ${KGEN_FOLDER_${folder}} ${dir}/${folder} SYMBOLIC)
  endforeach()
endfunction()

# kgen_layer(TARGET FOLDER [DEPS layer targets...] [EXTRA folders...] SOURCES ...)
# A static library over FOLDER's sources; its view is FOLDER, EXTRA, and the views of DEPS.
function(kgen_layer target)
  cmake_parse_arguments(L "" "FOLDER" "DEPS;EXTRA;SOURCES" ${ARGN})
  set(view ${L_FOLDER} ${L_EXTRA})
  foreach(dep IN LISTS L_DEPS)
    get_property(dep_view GLOBAL PROPERTY KGEN_VIEW_${dep})
    list(APPEND view ${dep_view})
  endforeach()
  list(REMOVE_DUPLICATES view)
  set_property(GLOBAL PROPERTY KGEN_VIEW_${target} ${view})
  kgen_make_view(${target} ${view})
  add_library(${target} STATIC ${L_SOURCES})
  target_include_directories(${target} PRIVATE ${KGEN_VIEWS_DIR}/${target} ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(${target} PUBLIC ${L_DEPS})
endfunction()

# kgen_everything_view(TARGET): programs above every layer (the CLI, tests) see all folders.
function(kgen_everything_view target)
  kgen_make_view(everything kgen_device base cache generator compiler driver jit tuning ops check tools tests)
  target_include_directories(${target} PRIVATE ${KGEN_VIEWS_DIR}/everything ${PROJECT_SOURCE_DIR}/include)
endfunction()
