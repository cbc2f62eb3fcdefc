# posenc's layers as targets (docs/architecture.md): each layer of libposenc is an object library
# that sees only its own headers and those of the layers below it, so that an include against the
# layering does not compile ("no such file"), whatever the file.
#
#   posenc_layer(<name> SOURCES <files...> SEES <src folders...> PUBLIC <include/posenc entries...>)
#
# makes the object library posenc_layer_<name> from SOURCES (relative to the calling directory),
# whose include path is a view in the build tree: links to the src/ folders SEES names (for
# "detail/checks.h") and to the entries of include/posenc/ PUBLIC names (for <posenc/ops.h>),
# nothing else. version.h is the generated one. The library's usage requirements (LibTorch,
# OpenMP, the compile options every layer shares) come with it; libposenc is the objects of all
# the layers (posenc_add_layers_to).

set(_posenc_layers "" CACHE INTERNAL "")

# The include view of a layer: sets <name>_VIEW to a folder holding "src" and "include" for the
# include path (also used by the libraries above libposenc: posenc::io, the programs).
function(posenc_layer_view name)
  cmake_parse_arguments(PARSE_ARGV 1 LAYER "" "" "SEES;PUBLIC")
  set(view "${PROJECT_BINARY_DIR}/layers/${name}")
  file(REMOVE_RECURSE "${view}")
  file(MAKE_DIRECTORY "${view}/src" "${view}/include/posenc")
  foreach(folder IN LISTS LAYER_SEES)
    file(CREATE_LINK "${PROJECT_SOURCE_DIR}/src/${folder}" "${view}/src/${folder}" SYMBOLIC)
  endforeach()
  foreach(entry IN LISTS LAYER_PUBLIC)
    if(entry STREQUAL "version.h")
      set(target "${PROJECT_BINARY_DIR}/include/posenc/version.h")
    else()
      set(target "${PROJECT_SOURCE_DIR}/include/posenc/${entry}")
    endif()
    if(NOT EXISTS "${target}")
      message(FATAL_ERROR "posenc_layer_view(${name}): no ${target}")
    endif()
    file(CREATE_LINK "${target}" "${view}/include/posenc/${entry}" SYMBOLIC)
  endforeach()
  set(${name}_VIEW "${view}" PARENT_SCOPE)
endfunction()

function(posenc_layer name)
  cmake_parse_arguments(PARSE_ARGV 1 LAYER "" "" "SOURCES;SEES;PUBLIC")
  posenc_layer_view(${name} SEES ${LAYER_SEES} PUBLIC ${LAYER_PUBLIC})
  set(view "${${name}_VIEW}")

  set(library posenc_layer_${name})
  add_library(${library} OBJECT ${LAYER_SOURCES})
  target_include_directories(${library} PRIVATE "${view}/src" "${view}/include")
  target_compile_features(${library} PRIVATE cxx_std_${POSENC_CXX_STANDARD})
  target_link_libraries(${library} PRIVATE ${TORCH_LIBRARIES} OpenMP::OpenMP_CXX
    $<BUILD_INTERFACE:nlohmann_json::nlohmann_json>)
  # Every product and sum rounds on its own, as in the composite (ATen) kernels the hand-written
  # ones are tested against: no fused multiply-add contraction, whatever -march a build adds.
  target_compile_options(${library} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off -Wall -Wextra>)
  if(POSENC_WITH_CUDA)
    target_compile_definitions(${library} PRIVATE POSENC_WITH_CUDA=1)
  endif()
  set_target_properties(${library} PROPERTIES POSITION_INDEPENDENT_CODE ON CXX_VISIBILITY_PRESET default)
  # The sources are many small files that all parse LibTorch's headers: unity batches parse them
  # once per batch (POSENC_UNITY_BUILD=OFF to compile file by file).
  if(POSENC_UNITY_BUILD)
    set_target_properties(${library} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
  set(_posenc_layers ${_posenc_layers} ${library} CACHE INTERNAL "")
endfunction()

# Puts the objects of every layer into `target` (libposenc).
function(posenc_add_layers_to target)
  foreach(library IN LISTS _posenc_layers)
    target_sources(${target} PRIVATE $<TARGET_OBJECTS:${library}>)
    add_dependencies(${target} ${library})
  endforeach()
endfunction()
