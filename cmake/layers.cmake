# The layers of mpc, enforced by the compiler. Every module is its own library whose
# include path is a *view*: a directory under <build>/layers/<module>/ holding links to
# only the modules it may use, never the source root. So a wrong include (passes/
# reaching into backends/, a backend into passes/) fails to compile with "No such file".
#
#   base  <-  graph  <-  passes  <-----------------  engine  <-  tools
#                    <-  backends (backend.h)  <-  backends/cpu, backends/cuda
#   base  <-  distributed (the Communicator over MPI)  <-  backends/cpu (collective kernels), engine
#
# mpc_layer_view(<target> <entry>...) gives <target> a view with these entries:
#   base, graph, passes, distributed,
#   engine, tools                        the source directory
#   backends                             backends/*.h only (the Backend interface)
#   backends/cpu, backends/cuda          that backend (needs `backends` too)
#   proto                                the generated <build>/proto headers
function(mpc_layer_view target)
  set(view ${PROJECT_BINARY_DIR}/layers/${target})
  file(REMOVE_RECURSE ${view})
  file(MAKE_DIRECTORY ${view})
  foreach(entry ${ARGN})
    if(entry STREQUAL "backends")
      file(MAKE_DIRECTORY ${view}/backends)
      file(GLOB headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/backends/*.h)
      foreach(h ${headers})
        get_filename_component(name ${h} NAME)
        file(CREATE_LINK ${h} ${view}/backends/${name} SYMBOLIC)
      endforeach()
    elseif(entry MATCHES "^backends/")
      file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${entry} ${view}/${entry} SYMBOLIC)
    elseif(entry STREQUAL "proto")
      file(CREATE_LINK ${PROJECT_BINARY_DIR}/proto ${view}/proto SYMBOLIC)
    else()
      file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${entry} ${view}/${entry} SYMBOLIC)
    endif()
  endforeach()
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${view}>)
endfunction()
