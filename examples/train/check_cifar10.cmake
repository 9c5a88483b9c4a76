# ctest helper for examples/pipeprop_train_inputs.cmake: CIFAR-10 works with --network cnn32 (both networks
# took 1x28x28, so every CIFAR-10 directory failed). Writes a tiny synthetic CIFAR-10 binary dataset (5 training
# batches of 20 records and a test batch of 20; 3073-byte records: label, then the red, green and blue 32x32 planes;
# the label sets the brightness of one plane, so the classes are learnable), then: --mode sgd and --mode pb with
# --network cnn32 train and evaluate it (exit 0, JSON result naming cnn32, 100 samples); --network cnn on it fails
# with exit 1 and a message naming the image sizes the networks take; --network resnet20 takes the 3x32x32 input
# (network types resnet20-on-cifar, resnet20-cifar), resnet56 on it exits 2 (not compiled). Inputs: PROGRAM, PERL,
# WORK.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/cifar-10-batches-bin)
execute_process(
  COMMAND ${PERL} -e [=[
    my ($dir) = @ARGV;
    for my $f ((map { "data_batch_$_.bin" } 1..5), "test_batch.bin") {
      open(my $h, '>', "$dir/$f") or die "$f: $!"; binmode $h;
      for my $i (0..19) {
        my $label = ($i * 3 + length($f)) % 10;
        my @px = map { my ($c, $p) = (int($_ / 1024), $_ % 1024);
                       ($c == $label % 3 ? 20 * $label : 0) + (($p * 7 + $i * 13) % 50) } 0..3071;
        print $h pack('C*', $label, @px);
      }
      close($h);
    }]=] ${WORK}/cifar-10-batches-bin
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "writing the synthetic CIFAR-10 files failed (${rc})")
endif()
file(SIZE ${WORK}/cifar-10-batches-bin/test_batch.bin size)
if(NOT size EQUAL 61460)
  message(FATAL_ERROR "test_batch.bin has ${size} bytes, expected 20 records of 3073")
endif()

function(run_program expect name)
  execute_process(COMMAND ${PROGRAM} --data ${WORK} --max-test-samples 20 --progress log ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL expect)
    message(FATAL_ERROR "${name}: exit code ${rc}, expected ${expect}:\n${out}\n${err}")
  endif()
  string(STRIP "${out}" out)
  set(last "")
  if(NOT out STREQUAL "")
    string(REGEX MATCH "[^\n]*$" last "${out}")
  endif()
  set(last_${name} "${last}" PARENT_SCOPE)
  set(err_${name} "${err}" PARENT_SCOPE)
endfunction()

run_program(0 sgd --mode sgd --network cnn32 --batch 10 --epochs 2)
run_program(0 pb --mode pb --network cnn32 --stages fine --reference-batch 32 --batch 2)
foreach(name sgd pb)
  if(NOT last_${name} MATCHES "^\\{\"mode\":\"${name}\",\"network\":\"cnn32\",.*\"samples\":(100|200),.*\"test_accuracy\":[0-9.]+,.*\"test_samples\":20,")
    message(FATAL_ERROR "${name}: unexpected result line: ${last_${name}}")
  endif()
  if(NOT err_${name} MATCHES "data: 100 training and 20 test images 3x32x32 \\(cifar10\\)")
    message(FATAL_ERROR "${name}: the CIFAR-10 files were not read as 3x32x32:\n${err_${name}}")
  endif()
endforeach()
# The ResNets take the input --data holds: here 3x32x32, Online Norm, PB with a stage per conv, and
# group norm in --mode sgd; ResNet-56 on 3x32x32 with group norm trains too, and a type the default build leaves out
# (ResNet-110 on 3x32x32) is refused with a message naming the CMake option (exit 2).
run_program(0 resnet_pb --mode pb --network resnet20 --norm on --stages layer --reference-batch 32 --max-samples 40)
if(NOT last_resnet_pb MATCHES "^\\{\"mode\":\"pb\",\"network\":\"resnet20\",.*\"samples\":40,.*\"network_type\":\"resnet20-on-cifar\",.*\"stages\":20,")
  message(FATAL_ERROR "resnet20 --norm on on CIFAR-10: unexpected result line: ${last_resnet_pb}")
endif()
run_program(0 resnet_sgd --mode sgd --network resnet20 --batch 10 --max-samples 40)
if(NOT last_resnet_sgd MATCHES "^\\{\"mode\":\"sgd\",\"network\":\"resnet20\",.*\"network_type\":\"resnet20-cifar\"")
  message(FATAL_ERROR "resnet20 on CIFAR-10: unexpected result line: ${last_resnet_sgd}")
endif()
run_program(0 resnet56 --mode sgd --network resnet56 --batch 10 --max-samples 40)
if(NOT last_resnet56 MATCHES "^\\{\"mode\":\"sgd\",\"network\":\"resnet56\",.*\"network_type\":\"resnet56-cifar\"")
  message(FATAL_ERROR "resnet56 on CIFAR-10: unexpected result line: ${last_resnet56}")
endif()
run_program(2 resnet110 --mode sgd --network resnet110 --batch 10 --max-samples 40)
if(NOT err_resnet110 MATCHES "resnet110 \\(network type resnet110-cifar\\) is not compiled into this build of the main program for --mode sgd \\(CMake option PIPEPROP_TRAIN_NETWORKS=[^ ]*; configure with -DPIPEPROP_TRAIN_NETWORKS=all")
  message(FATAL_ERROR "resnet110 on CIFAR-10: no message naming the CMake option:\n${err_resnet110}")
endif()
foreach(name resnet_pb resnet_sgd resnet56)
  if(NOT err_${name} MATCHES "data: 100 training and 20 test images 3x32x32 \\(cifar10\\)")
    message(FATAL_ERROR "${name}: the CIFAR-10 files were not read as 3x32x32:\n${err_${name}}")
  endif()
endforeach()
run_program(1 cnn --mode sgd --network cnn --batch 10)
if(NOT err_cnn MATCHES "image size 3x32x32 .*does not match the network input 1x28x28 \\(--network cnn; the networks take: cnn 1x28x28, cnn32 3x32x32")
  message(FATAL_ERROR "--network cnn on CIFAR-10: no message naming the networks' inputs:\n${err_cnn}")
endif()
message("cnn32 on synthetic CIFAR-10: ${last_sgd}")
