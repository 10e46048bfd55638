# The installed CMake package (docs/embedding.md). `cmake --install build --prefix P` gives
#   P/include/mpc/mpc.h               the one public header (consumers #include "mpc/mpc.h")
#   P/lib/libmpc.a, libmpc.so*        the library, static and shared
#   P/lib/libmpc_proto.a, libmpc_cuda.a   parts the static library links (internal)
#   P/lib/cmake/mpc/                  mpcConfig.cmake, its version file, the exported targets
#   P/bin/mpc, mpc-train              the tools
# Targets: mpc::mpc_static, mpc::mpc_shared, and mpc::mpc (one of them, chosen by the
# consumer's MPC_USE_STATIC; cmake/mpcConfig.cmake.in). The targets file CMake generates
# finds everything from its own location, so the prefix can be moved or copied.
# Included from the top-level CMakeLists.txt after every library target exists.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# mpc.h's version macros are what a consumer's code sees of project(VERSION): they must
# agree, and a release that changes one and not the other stops here.
file(STRINGS ${PROJECT_SOURCE_DIR}/engine/mpc.h mpc_version_lines REGEX "^#define MPC_VERSION_")
foreach(part MAJOR MINOR PATCH STRING)
  if(part STREQUAL "STRING")
    set(expected "\"${PROJECT_VERSION}\"")
  else()
    set(expected "${PROJECT_VERSION_${part}}")
  endif()
  set(found "")
  foreach(line ${mpc_version_lines})
    if(line MATCHES "^#define MPC_VERSION_${part} +([^ ]+)")
      set(found "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  if(NOT found STREQUAL expected)
    message(FATAL_ERROR "engine/mpc.h: MPC_VERSION_${part} is '${found}' but project(VERSION) "
                        "says '${expected}': update both together")
  endif()
endforeach()

# Keeps <target>'s <property> to this build tree: every entry (or only the <entries> given)
# wrapped in $<BUILD_INTERFACE:...>, which the export leaves out.
function(mpc_build_tree_only target property)
  set(only ${ARGN})
  get_target_property(values ${target} ${property})
  if(NOT values)
    return()
  endif()
  set(result)
  foreach(v ${values})
    if((NOT only OR v IN_LIST only) AND NOT v MATCHES "^\\$<BUILD_INTERFACE:")
      set(v "$<BUILD_INTERFACE:${v}>")
    endif()
    list(APPEND result "${v}")
  endforeach()
  set_property(TARGET ${target} PROPERTY ${property} "${result}")
endfunction()

set(MPC_EXPORTED_TARGETS mpc_static mpc_shared mpc_proto)

# The CUDA backend is a static library of its own (backends/cuda/CMakeLists.txt) that libmpc
# links PUBLIC, which this tree's tests rely on (its headers, MPC_WITH_CUDA). Installed it
# is lib/libmpc_cuda.a: inside the shared library already, passed on link-only by the static
# one, and neither hands consumers its include directories, MPC_WITH_CUDA or this machine's
# cuDNN path (the package finds cuDNN again as mpc::cudnn).
if(TARGET mpc_cuda)
  list(APPEND MPC_EXPORTED_TARGETS mpc_cuda)
  mpc_build_tree_only(mpc_shared INTERFACE_LINK_LIBRARIES mpc_cuda)
  mpc_build_tree_only(mpc_static INTERFACE_LINK_LIBRARIES mpc_cuda)
  set_property(TARGET mpc_static APPEND PROPERTY INTERFACE_LINK_LIBRARIES "$<LINK_ONLY:mpc_cuda>")
  mpc_build_tree_only(mpc_cuda INTERFACE_INCLUDE_DIRECTORIES)
  mpc_build_tree_only(mpc_cuda INTERFACE_COMPILE_DEFINITIONS)
  mpc_build_tree_only(mpc_cuda INTERFACE_LINK_LIBRARIES ${MPC_CUDNN_LIBRARY} ${MPC_NCCL_LIBRARY})
  set_property(TARGET mpc_cuda APPEND PROPERTY INTERFACE_LINK_LIBRARIES "$<INSTALL_INTERFACE:mpc::cudnn>")
  if(MPC_NCCL_LIBRARY)
    set_property(TARGET mpc_cuda APPEND PROPERTY INTERFACE_LINK_LIBRARIES "$<INSTALL_INTERFACE:mpc::nccl>")
  endif()
endif()

# Consumers write #include "mpc/mpc.h".
foreach(t mpc_static mpc_shared)
  target_include_directories(${t} INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endforeach()
# Installed binaries find the CUDA libraries (outside the system's library path) the way
# the build tree's do. Directories of the toolkit, never of this build.
set_target_properties(mpc_shared mpc_tool mpc_train PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)

install(TARGETS ${MPC_EXPORTED_TARGETS} EXPORT mpcTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS mpc_tool mpc_train RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# Only the public header: it includes nothing else of ours (a test checks the installed tree).
install(FILES ${PROJECT_SOURCE_DIR}/engine/mpc.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mpc)

set(MPC_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/mpc)
install(EXPORT mpcTargets NAMESPACE mpc:: DESTINATION ${MPC_PACKAGE_DIR})
if(MPC_CUDA_ENABLED)
  set(MPC_CONFIG_CUDA_NOTE ", the CUDA toolkit and cuDNN")
endif()
set(MPC_CONFIG_WITH_NCCL OFF)
if(TARGET mpc_cuda AND MPC_NCCL_LIBRARY)
  set(MPC_CONFIG_WITH_NCCL ON)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/mpcConfig.cmake.in
  ${PROJECT_BINARY_DIR}/package/mpcConfig.cmake INSTALL_DESTINATION ${MPC_PACKAGE_DIR})
# 0.x like 1.x: within a major version no source-incompatible change (docs/embedding.md).
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/mpcConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/mpcConfig.cmake ${PROJECT_BINARY_DIR}/package/mpcConfigVersion.cmake
  DESTINATION ${MPC_PACKAGE_DIR})
