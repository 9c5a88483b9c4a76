# --network resnet20 (examples/train/networks.hpp: ResNet-20 with group norm, residual blocks with projection
# shortcuts) in every mode of the main program: short runs on Fashion-MNIST that must train (exit 0, JSON result
# naming the network), with PB fine-grained (cuts inside every block, the skip tensor carried across stages) and
# a synchronous schedule with 2BP cut inside a block. Included after pipeprop_train.cmake (its helper and variables).
if(PIPEPROP_BUILD_TESTS)
  set(num "-?[0-9][0-9.e+-]*")
  set(resnet_quick --network resnet20 --max-samples 192 --max-test-samples 256 --progress log
                   --data ${pipeprop_train_data})
  pipeprop_train_test(resnet20_sgd EXPECT 0
    ARGS --mode sgd --batch 16 --lr 0.05 ${resnet_quick}
    LAST_LINE_REGEX "^\\{\"mode\":\"sgd\",\"network\":\"resnet20\",\"batch\":16,.*\"train_loss\":${num},.*\\}$")
  # Fine-grained PB: every parametric node its own stage (39: 19 convs, 19 group norms, the dense layer; the two
  # projection shortcuts share their add's stage), first delay 2 (S - 1) = 76.
  pipeprop_train_test(resnet20_pb_fine EXPECT 0
    ARGS --mode pb --stages fine --mitigation sc_lwp --reference-batch 32 --lr 0.05 --momentum 0.9 ${resnet_quick}
    REGEX "pb: 39 stages.*pb: stage  0 layers .0, 1.  D = 76"
    LAST_LINE_REGEX "^\\{\"mode\":\"pb\",\"network\":\"resnet20\",\"batch\":1,.*\"stages\":39,\"delays\":\"76,74,.*,2,0\",.*\\}$")
  # Synchronous 1F1B with 2BP, 3 stages cut inside the first block's body (node 6) and inside a later block.
  pipeprop_train_test(resnet20_sync_1f1b_2bp EXPECT 0
    ARGS --mode sync --schedule 1f1b --two-stage-bp on --micro-batches 4 --batch 16 --stages 6,40 ${resnet_quick}
    LAST_LINE_REGEX "^\\{\"mode\":\"sync\",\"network\":\"resnet20\",.*\"schedule\":\"1f1b\\+2bp\",\"two_stage_bp\":true,\"micro_batches\":4,\"stages\":3,.*\\}$")
  # The PB paper's fine-grained ResNet: --stages layer, every conv a stage with its norm and relu (20
  # stages: 19 convs and the dense layer; the projection shortcuts join their add's stage), first delay 38.
  pipeprop_train_test(resnet20_pb_layer EXPECT 0
    ARGS --mode pb --stages layer --mitigation sc_lwp --reference-batch 32 --lr 0.05 --momentum 0.9 ${resnet_quick}
    REGEX "pb: 20 stages.*pb: stage  0 layers .0, 4.  D = 38.*pb: stage 19 layers .80, 81.  D =  0"
    LAST_LINE_REGEX "^\\{\"mode\":\"pb\",\"network\":\"resnet20\",\"batch\":1,.*\"norm\":\"gn\",\"network_type\":\"resnet20\",.*\"stages\":20,\"delays\":\"38,36,.*,2,0\",.*\\}$")
  # Online Normalization (--norm on) with LWP's weight-difference form, and in --mode sgd.
  pipeprop_train_test(resnet20_on_pb_layer_lwp_wd EXPECT 0
    ARGS --mode pb --norm on --stages layer --mitigation lwp_wd --reference-batch 32 --lr 0.05 --momentum 0.9
         ${resnet_quick}
    LAST_LINE_REGEX "^\\{\"mode\":\"pb\",\"network\":\"resnet20\",.*\"norm\":\"on\",\"network_type\":\"resnet20-on\",\"mitigation\":\"lwp_wd\",.*\"stages\":20,.*\\}$")
  pipeprop_train_test(resnet20_on_sgd EXPECT 0
    ARGS --mode sgd --norm on --batch 16 --lr 0.05 ${resnet_quick}
    LAST_LINE_REGEX "^\\{\"mode\":\"sgd\",\"network\":\"resnet20\",.*\"norm\":\"on\",\"network_type\":\"resnet20-on\".*\\}$")
  # ResNet-56: 56 weight-layer stages, first delay 110 (the dynamic stage code: more than 40 stages).
  set(resnet56_quick --network resnet56 --max-samples 64 --max-test-samples 64 --progress log
                     --data ${pipeprop_train_data})
  pipeprop_train_test(resnet56_pb_layer EXPECT 0
    ARGS --mode pb --stages layer --mitigation sc_lwp --reference-batch 32 --lr 0.05 --momentum 0.9 ${resnet56_quick}
    REGEX "pb: 56 stages.*pb: stage  0 layers .0, 4.  D = 110"
    LAST_LINE_REGEX "^\\{\"mode\":\"pb\",\"network\":\"resnet56\",.*\"network_type\":\"resnet56\",.*\"stages\":56,\"delays\":\"110,108,.*,0\",.*\\}$")
  pipeprop_train_test(resnet56_on_sgd EXPECT 0
    ARGS --mode sgd --norm on --batch 16 ${resnet56_quick}
    LAST_LINE_REGEX "^\\{\"mode\":\"sgd\",\"network\":\"resnet56\",.*\"network_type\":\"resnet56-on\".*\\}$")
  # --norm is the ResNets' option; --mode sync trains resnet20 with group norm only.
  pipeprop_train_test(norm_not_a_resnet EXPECT 2
    ARGS --mode sgd --network cnn --norm on --max-samples 64 --data ${pipeprop_train_data}
    REGEX "--norm: applies to --network resnet20 and resnet56.*Usage:")
  pipeprop_train_test(resnet56_sync_refused EXPECT 2
    ARGS --mode sync --network resnet56 --max-samples 64 --data ${pipeprop_train_data}
    REGEX "--network: resnet56 trains in --mode sgd and --mode pb.*Usage:")
  # A cut inside a projection shortcut is a bad option naming the node.
  pipeprop_train_test(resnet20_pb_cut_in_shortcut EXPECT 2
    ARGS --mode pb --stages 34 ${resnet_quick}
    REGEX "--stages.*node 34 \\(layer_09.shortcut_01\\).*Usage:")
endif()

# --network cnn-on: the small CNN with Online Normalization trains in --mode sgd and fine-grained --mode pb (its
# running state advancing in micro-batch order through the pipeline).
if(PIPEPROP_BUILD_TESTS)
  pipeprop_train_test(cnn_on_sgd EXPECT 0
    ARGS --mode sgd --network cnn-on --batch 32 --max-samples 2000 --max-test-samples 1000 --progress log
         --data ${pipeprop_train_data}
    LAST_LINE_REGEX "^\\{\"mode\":\"sgd\",\"network\":\"cnn-on\",.*\"test_accuracy\":0\\.[5-9][0-9]*,.*\\}$")
  pipeprop_train_test(cnn_on_pb_fine EXPECT 0
    ARGS --mode pb --network cnn-on --stages fine --mitigation sc_lwp --reference-batch 32 --lr 0.05 --momentum 0.9
         --max-samples 2000 --max-test-samples 1000 --progress log --data ${pipeprop_train_data}
    LAST_LINE_REGEX "^\\{\"mode\":\"pb\",\"network\":\"cnn-on\",\"batch\":1,.*\"test_accuracy\":0\\.[4-9][0-9]*,.*\"stages\":6,.*\\}$")
endif()

# --log-every: interval lines of the training loss in the metrics file (bench/pb_fidelity.sh's curves).
if(PIPEPROP_BUILD_TESTS)
  add_test(NAME pipeprop_train_log_every
           COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:pipeprop_train> -DDATA=${pipeprop_train_data}
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/pipeprop_train_log_every
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/train/check_log_every.cmake)
  set_tests_properties(pipeprop_train_log_every PROPERTIES ENVIRONMENT "OPENBLAS_NUM_THREADS=1" TIMEOUT 300)
endif()
