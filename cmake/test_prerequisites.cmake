# What the tests need beyond the libraries they link: Debian's Python with the reference
# packages (golden values, ONNX node tests, .npy files), the Fashion-MNIST files and the
# fortunes text. Found here, once, instead of assumed by each test: a missing one stops
# the configure naming the Debian package to install (scripts/install-deps.sh installs
# them all), the tests read the paths found (MPC_PYTHON, MPC_FASHION_MNIST_DIR), and
# scripts/check-deps.sh sees from the cache which package each comes from.

# Debian's interpreter, not the first python3 on PATH: only it has python3-torch & co.
find_program(MPC_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH REQUIRED
             DOC "Debian's python3, with numpy, onnx, torch and torchvision (the tests' references)")

# Records the file a Python module loads from as MPC_PYTHON_MODULE_<module> (a FILEPATH,
# so the dependency check can find its package); fails naming the package when it is absent.
function(mpc_require_python_module module package)
  set(var MPC_PYTHON_MODULE_${module})
  if(DEFINED CACHE{${var}} AND EXISTS "${${var}}")
    return()
  endif()
  execute_process(COMMAND ${MPC_PYTHON} -c "import sys, ${module}; sys.stdout.write(${module}.__file__)"
                  RESULT_VARIABLE status OUTPUT_VARIABLE file ERROR_VARIABLE error)
  if(NOT status EQUAL 0 OR NOT EXISTS "${file}")
    message(FATAL_ERROR "mpc tests: ${MPC_PYTHON} cannot import ${module}: install the Debian package "
                        "${package} (scripts/install-deps.sh does), or configure with -DMPC_BUILD_TESTS=OFF.\n${error}")
  endif()
  set(${var} "${file}" CACHE FILEPATH "Where ${MPC_PYTHON} imports ${module} from (${package})" FORCE)
endfunction()

mpc_require_python_module(numpy python3-numpy)
mpc_require_python_module(onnx python3-onnx)
mpc_require_python_module(torch python3-torch)
mpc_require_python_module(torchvision python3-torchvision)
mpc_require_python_module(matplotlib python3-matplotlib)  # tools/plot_metrics.py and its test
mpc_require_python_module(google.protobuf python3-protobuf)  # tests/tools/read_tensorboard.py

find_path(MPC_FASHION_MNIST_DIR NAMES train-images-idx3-ubyte.gz PATHS /usr/share/datasets/fashion-mnist
          NO_DEFAULT_PATH DOC "Fashion-MNIST's IDX files (Debian package dataset-fashion-mnist)")
find_path(MPC_FORTUNES_DIR NAMES computers PATHS /usr/share/games/fortunes
          NO_DEFAULT_PATH DOC "The fortune files the character-level model trains on (Debian package fortunes)")
foreach(pair "MPC_FASHION_MNIST_DIR;dataset-fashion-mnist" "MPC_FORTUNES_DIR;fortunes")
  list(GET pair 0 var)
  list(GET pair 1 package)
  if(NOT ${var})
    message(FATAL_ERROR "mpc tests: ${var} not found: install the Debian package ${package} "
                        "(scripts/install-deps.sh does), or configure with -DMPC_BUILD_TESTS=OFF")
  endif()
endforeach()
