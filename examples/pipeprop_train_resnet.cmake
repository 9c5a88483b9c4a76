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
