"""FLOPs and bytes per op (diagnoser/timeline/perf_model.py) on hand-computed shapes.

The argument lists are synthetic, written the way Kineto records them with record_shapes=True
(the addmm, conv2d, bmm and layer_norm lists are copied from the H100 timesformer trace in
../shared/external/tracelens); each expected number is worked out by hand in the comment."""
import pytest

from diagnoser.timeline.perf_model import _causal_pairs, is_modeled, work

BF, F32, S, SL = "c10::BFloat16", "float", "Scalar", "ScalarList"


def test_mm_fp32():
    w = work("aten::mm", [[8192, 32000], [32000, 1024]], [F32, F32], ["", ""])
    assert w.flops == 2 * 8192 * 32000 * 1024
    assert w.bytes == 4 * (8192 * 32000 + 32000 * 1024 + 8192 * 1024)
    assert (w.dtype, w.family) == ("fp32", "gemm")


def test_addmm_counts_bias_add_and_bias_read():
    w = work("aten::addmm", [[2304], [25088, 768], [768, 2304], [], []], [BF, BF, BF, S, S], ["", "", "", "1", "1"])
    assert w.flops == 2 * 25088 * 768 * 2304 + 25088 * 2304
    assert w.bytes == 2 * (25088 * 768 + 768 * 2304 + 25088 * 2304) + 2 * 2304
    assert w.dtype == "bf16"


def test_linear_flattens_leading_dims():
    w = work("aten::linear", [[3136, 8, 768], [2304, 768], [2304]], [BF, BF, BF], ["", "", ""])
    m = 3136 * 8
    assert w.flops == 2 * m * 768 * 2304 + m * 2304
    no_bias = work("aten::linear", [[3136, 8, 768], [2304, 768], []], [BF, BF, ""], ["", "", ""])
    assert no_bias.flops == 2 * m * 768 * 2304


def test_bmm_and_baddbmm():
    w = work("aten::bmm", [[37632, 8, 64], [37632, 64, 8]], [BF, BF], ["", ""])
    assert w.flops == 2 * 37632 * 8 * 64 * 8
    assert w.bytes == 2 * 37632 * (8 * 64 + 64 * 8 + 8 * 8)
    b = work("aten::baddbmm", [[4, 16, 32], [4, 16, 8], [4, 8, 32], [], []], [BF] * 3 + [S, S], [""] * 5)
    assert b.flops == 2 * 4 * 16 * 32 * 8 + 4 * 16 * 32


def test_matmul_broadcasts_batch_and_reads_weight_once():
    w = work("aten::matmul", [[3136, 12, 8, 64], [3136, 12, 64, 8]], [BF, BF], ["", ""])
    assert w.flops == 2 * 3136 * 12 * 8 * 64 * 8
    shared = work("aten::matmul", [[16, 128, 512], [512, 256]], [BF, BF], ["", ""])
    assert shared.flops == 2 * 16 * 128 * 512 * 256
    assert shared.bytes == 2 * (16 * 128 * 512 + 512 * 256 + 16 * 128 * 256)
    assert work("aten::matmul", [[4, 8], [9, 3]], [BF, BF], ["", ""]) is None  # K mismatch


def test_scaled_mm_fp8():
    w = work("aten::_scaled_mm", [[4096, 8192], [8192, 2048], [], []], ["c10::Float8_e4m3fn"] * 2 + [F32, F32],
             [""] * 4)
    assert w.flops == 2 * 4096 * 8192 * 2048
    assert w.bytes == 4096 * 8192 + 8192 * 2048 + 2 * 4096 * 2048
    assert w.dtype == "fp8"


def test_conv2d_patch_embedding_stride_16():
    # 224 -> (224 - 15 - 1) // 16 + 1 = 14 output rows and columns
    w = work("aten::conv2d", [[128, 3, 224, 224], [768, 3, 16, 16], [768], [], [], [], []],
             [BF, BF, BF, SL, SL, SL, S], ["", "", "", "[16, 16]", "[0, 0]", "[1, 1]", "1"])
    assert w.flops == 2 * 128 * 768 * 14 * 14 * 3 * 16 * 16
    assert w.bytes == 2 * (128 * 3 * 224 * 224 + 768 * 3 * 16 * 16 + 128 * 768 * 14 * 14)
    assert w.family == "conv"


def test_convolution_padding_dilation_groups():
    # depthwise 3x3, pad 2, dilation 2, stride 1 on 56x56: out = 56 + 4 - 4 - 1 + 1 = 56
    w = work("aten::convolution", [[8, 64, 56, 56], [64, 1, 3, 3], [], [], [], [], [], [], []],
             [BF, BF, "", SL, SL, SL, S, SL, S], ["", "", "", "[1, 1]", "[2, 2]", "[2, 2]", "False", "[0, 0]", "64"])
    assert w.flops == 2 * 8 * 64 * 56 * 56 * 1 * 9


def test_transposed_convolution_counts_input_positions():
    w = work("aten::convolution", [[2, 16, 8, 8], [16, 4, 2, 2], [], [], [], [], [], [], []],
             [F32, F32, "", SL, SL, SL, S, SL, S], ["", "", "", "[2, 2]", "[0, 0]", "[1, 1]", "True", "[0, 0]", "1"])
    assert w.flops == 2 * 2 * 16 * 8 * 8 * 4 * 4
    assert w.bytes == 4 * (2 * 16 * 64 + 16 * 4 * 4 + 2 * 4 * 16 * 16)  # out 16x16


def test_convolution_backward_follows_output_mask():
    dims = [[8, 32, 28, 28], [8, 16, 28, 28], [32, 16, 3, 3], [], [], [], [], [], [], [], []]
    types = [BF, BF, BF, SL, SL, SL, SL, S, SL, S, SL]
    conc = ["", "", "", "[32]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]
    fwd = 2 * 8 * 32 * 28 * 28 * 16 * 9
    assert work("aten::convolution_backward", dims, types, conc + ["[True, True, True]"]).flops == 2 * fwd
    assert work("aten::convolution_backward", dims, types, conc + ["[False, True, True]"]).flops == fwd


def test_sdpa_causal_and_not():
    dims = [[4, 16, 1024, 64]] * 3 + [[], [], [], []]
    types = [BF] * 3 + ["", S, S, ""]
    full = work("aten::scaled_dot_product_attention", dims, types, ["", "", "", "", "0.", "False", ""])
    assert full.flops == 2 * 4 * 16 * 1024 * 1024 * (64 + 64)
    assert full.bytes == 2 * 4 * (4 * 16 * 1024 * 64)
    causal = work("aten::scaled_dot_product_attention", dims, types, ["", "", "", "", "0.", "True", ""])
    assert causal.flops == 2 * 4 * 16 * (1024 * 1025 // 2) * 128


def test_causal_pairs_top_left_alignment():
    assert _causal_pairs(4, 4) == 1 + 2 + 3 + 4
    assert _causal_pairs(6, 4) == 10 + 2 * 4   # rows past Lk see every key
    assert _causal_pairs(1, 4096) == 1          # torch's is_causal: query 0 sees key 0 only


def test_flash_backward_is_two_and_a_half_forward():
    q = [2, 8, 512, 128]
    dims = [q, q, q, q, q, [2, 8, 512]] + [[]] * 9
    types = [BF] * 5 + [F32] + [""] * 9
    conc = [""] * 11 + ["False"] + [""] * 3
    w = work("aten::_scaled_dot_product_flash_attention_backward", dims, types, conc)
    assert w.flops == 2.5 * 2 * 2 * 8 * 512 * 512 * 256


def test_bandwidth_families():
    x = [8192, 32000]
    add = work("aten::add", [[128, 197, 768], [1, 197, 768], []], [BF, BF, S], ["", "", "1"])
    assert add.bytes == 2 * (128 * 197 * 768 + 197 * 768 + 128 * 197 * 768)
    assert add.family == "elementwise"
    inplace = work("aten::add_", [[128, 768, 14, 14], [1, 768, 1, 1], []], [BF, BF, S], ["", "", "1"])
    assert inplace.bytes == 2 * (2 * 128 * 768 * 196 + 768)
    cast = work("aten::copy_", [[1, 128, 3, 224, 224]] * 2 + [[]], [BF, F32, S], ["", "", "False"])
    assert cast.bytes == (2 + 4) * 128 * 3 * 224 * 224 and cast.family == "copy"
    sm = work("aten::_log_softmax_backward_data", [x, x, [], []], [F32, F32, S, S], ["", "", "1", "6"])
    assert sm.bytes == 3 * 4 * 8192 * 32000 and sm.family == "softmax"
    ln = work("aten::native_layer_norm", [[3136, 8, 768], [], [768], [768], []], [BF, SL, BF, BF, S],
              ["", "[768]", "", "", "1e-06"])
    assert ln.bytes == 2 * (2 * 3136 * 8 * 768 + 2 * 768) and ln.family == "norm"
    red = work("aten::sum", [x, [], [], []], [F32, SL, S, ""], ["", "[0]", "True", ""])
    assert red.bytes == 4 * 8192 * 32000 and red.family == "reduction"


def test_elementwise_out_overload_writes_its_out_tensor():
    # recorded in fixtures/torch/x_ddp_comm_wait: mul(self, 2.0, out=t), types [float, double, float]
    w = work("aten::mul", [[32000, 4096], [], [32000, 4096]], [F32, "double", F32], ["", "", ""])
    assert w.bytes == 4 * 32000 * 4096 * 2 + 8  # self read, out written (the 0-dim double: 8 bytes)
    both = work("aten::mul", [[64, 64], [64, 64]], [F32, F32], ["", ""])
    assert both.bytes == 4 * 64 * 64 * 3


def test_index_select_moves_the_selected_rows_only():
    # embedding lookup recorded in ../shared/corpus/torch/sdpa_attention: 16384 rows of a 32000x1024 fp16 table
    w = work("aten::index_select", [[32000, 1024], [], [16384]], ["c10::Half", S, "long int"], ["", "0", ""])
    assert w.bytes == 2 * 2 * 16384 * 1024 + 8 * 16384
    assert is_modeled("aten::index_select")


def test_unmodelled_and_odd_arguments():
    assert work("aten::view", [[4, 4], []], [F32, SL], ["", "[16]"]) is None
    assert not is_modeled("aten::empty_strided") and is_modeled("aten::addmm") and is_modeled("aten::mul_")
    assert work("aten::mm", [["a", 2], [2, 2]], [F32, F32], ["", ""]) is None
    assert work("aten::mm", None, None, None) is None
    assert work("aten::conv2d", [[1, 3, 4, 4], [8, 3, 9, 9], [], [], [], [], []],
                [F32, F32, "", SL, SL, SL, S], ["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "1"]) is None  # no output
    assert work("aten::scaled_dot_product_attention", [[2, 3]] * 3, [BF] * 3, [""] * 3) is None


def test_cudnn_attention_backward_reads_is_causal_where_torch_records_it():
    # the argument lists of ../shared/corpus/torch/healthy (bf16, causal): is_causal is the 15th argument
    q = [8, 16, 2048, 128]
    dims = [q] * 5 + [[8, 16, 2048, 1]] + [[]] * 10
    types = [BF] * 5 + [F32, "long int", "long int", "", "", "", S, S, S, S, ""]
    conc = [""] * 11 + ["2048", "2048", "0.", "True", ""]
    w = work("aten::_scaled_dot_product_cudnn_attention_backward", dims, types, conc)
    assert w.flops == 2.5 * 2 * 8 * 16 * (2048 * 2049 // 2) * 256


def test_strides_a_transposed_input_makes_a_bandwidth_op_strided():
    # synthetic, in the form ../shared/corpus and fixtures/torch/roofline_pairs record (PyTorch >= 2.1):
    # add(t1.t(), t2) of 8192x8192 bf16 - the first input walks dim -2 with unit stride, the second dim -1
    dims, types = [[8192, 8192], [8192, 8192], []], [BF, BF, S]
    plain = work("aten::add", dims, types, ["", "", "1"], [[8192, 1], [8192, 1], []])
    trans = work("aten::add", dims, types, ["", "", "1"], [[1, 8192], [8192, 1], []])
    assert not plain.strided and trans.strided
    assert plain.bytes == trans.bytes == 3 * 2 * 8192 * 8192  # the same compulsory bytes
    assert not work("aten::add", dims, types, ["", "", "1"]).strided  # no strides recorded: nothing said


def test_strides_one_shared_layout_is_not_strided_and_a_step_slice_is():
    cl = [256 * 56 * 56, 1, 56 * 256, 256]  # channels_last NCHW strides
    x = [[32, 256, 56, 56], [32, 256, 56, 56]]
    assert not work("aten::mul", x, [BF, BF], ["", ""], [cl, cl]).strided  # both channels_last
    contig = [256 * 56 * 56, 56 * 56, 56, 1]
    assert work("aten::mul", x, [BF, BF], ["", ""], [cl, contig]).strided  # one each: a transposing walk
    assert work("aten::gelu", [[4096, 1024]], [BF], [""], [[2048, 2]]).strided  # x[:, ::2]: no unit stride
    assert not work("aten::gelu", [[4096, 1024]], [BF], [""], [[2048, 1]]).strided  # x[:, :1024]: rows apart, unit inner
    # a GEMM's transposed operand is its layout, not a slow walk: strided is for bandwidth-bound ops
    assert not work("aten::mm", [[64, 64], [64, 64]], [BF, BF], ["", ""], [[64, 1], [1, 64]]).strided


def test_strides_an_expanded_input_is_read_once_per_distinct_element():
    # a bias expanded to 4096x1024 (stride 0 along rows) read once: 1024 elements, not 4M
    w = work("aten::add", [[4096, 1024], [4096, 1024], []], [F32, F32, S], ["", "", "1"],
             [[1024, 1], [0, 1], []])
    assert w.bytes == 4 * (4096 * 1024 + 1024 + 4096 * 1024)
    odd = work("aten::add", [[4096, 1024], [4096, 1024], []], [F32, F32, S], ["", "", "1"], [[1024], "x", []])
    assert odd.bytes == 4 * 3 * 4096 * 1024 and not odd.strided  # strides that do not fit the shapes are ignored


def test_strides_an_overlapping_window_view_reads_its_span_once():
    # x.unfold(0, 64, 1) of a 4096-element fp32 vector: 4033 windows of 64, strides [1, 1]: 4096 distinct elements
    w = work("aten::sum", [[4033, 64]], [F32], [""], [[1, 1]])
    assert w.bytes == 4 * 4096
