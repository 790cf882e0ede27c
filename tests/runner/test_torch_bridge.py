"""The optional torch bridge: a torch module as the dense part; autograd gives the embedding gradients."""

import numpy as np
import pytest

import tpu_embedding_shim as tf

from .problem import D, columns, estimator, input_fn_for, make_data, numpy_model_fn

torch = pytest.importorskip(
    "torch", reason="needs torch: the `torch` extra, pip install -e '.[torch]'"
)  # torch is an optional extra; this test needs it
from tpu_embedding_shim.runner import torch_bridge  # noqa: E402

TRAIN, TEST = make_data(1024, seed=0), make_data(256, seed=1)
W0 = np.linspace(-0.5, 0.5, 3 * D).astype(np.float32)


def torch_model_fn(pooled, sequence, lr=0.5):
    def model_fn(features, labels, mode, params):
        state = params["dense_state"]
        module = state.setdefault("module", _linear())
        optimizer = state.setdefault("optimizer", torch.optim.SGD(module.parameters(), lr=lr))
        net = torch_bridge.to_torch(tf.keras.layers.DenseFeatures(pooled)(features))
        seq_np, lengths = tf.keras.experimental.SequenceFeatures(sequence)(features)
        seq = torch_bridge.to_torch(seq_np)
        count = torch.as_tensor(np.maximum(lengths, 1), dtype=torch.float32)
        z = torch.cat([net, seq.sum(dim=1) / count[:, None]], dim=1)
        logits = module(z).squeeze(-1)
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.tpu.TPUEstimatorSpec(mode, predictions={"probabilities": torch.sigmoid(logits)})
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.as_tensor(labels))
        return tf.estimator.tpu.TPUEstimatorSpec(
            mode,
            loss=loss,
            train_op=torch_bridge.train_op(optimizer),
            eval_metrics=(
                lambda labels, p: {"auc": tf.compat.v1.metrics.auc(labels, p)},
                [labels, torch.sigmoid(logits)],
            ),
        )

    return model_fn


def _linear():
    module = torch.nn.Linear(3 * D, 1)
    with torch.no_grad():
        module.weight.copy_(torch.from_numpy(W0[None, :]))
        module.bias.zero_()
    return module


def test_torch_model_trains_and_matches_its_numpy_twin(tmp_path):
    pooled, sequence, cols = columns()
    with_torch = estimator(tmp_path / "torch", torch_model_fn(pooled, sequence), cols)
    with_numpy = estimator(tmp_path / "numpy", numpy_model_fn(pooled, sequence, w0=W0), cols)  # gradients by hand
    with_torch.train(input_fn_for(TRAIN), steps=5)
    with_numpy.train(input_fn_for(TRAIN), steps=5)
    for table in ("tbl_user", "tbl_hist_item_shared_embedding"):
        np.testing.assert_allclose(
            with_torch.get_variable_value(table), with_numpy.get_variable_value(table), rtol=1e-5, atol=1e-6
        )

    first = with_torch.evaluate(input_fn_for(TEST))
    for _ in range(3):
        with_torch.train(input_fn_for(TRAIN))
    last = with_torch.evaluate(input_fn_for(TEST))
    assert last["loss"] < first["loss"] and last["auc"] > 0.9
    predictions = list(with_torch.predict(input_fn_for(TEST)))
    assert len(predictions) == 256 and 0 < float(predictions[0]["probabilities"]) < 1


def test_torch_module_and_optimizer_resume_from_the_checkpoint(tmp_path):
    pooled, sequence, cols = columns()
    first = estimator(tmp_path / "resumed", torch_model_fn(pooled, sequence), cols)
    first.train(input_fn_for(TRAIN), steps=4)
    assert not np.array_equal(first.dense_state["module"].weight.detach().numpy(), W0[None, :])
    resumed = estimator(tmp_path / "resumed", torch_model_fn(pooled, sequence), cols, seed=5)
    resumed.train(input_fn_for(TRAIN), steps=2)  # the model_fn's fresh module is loaded from the checkpoint first

    once = estimator(tmp_path / "once", torch_model_fn(pooled, sequence), cols)
    once.train(input_fn_for(TRAIN), steps=4)
    once.train(input_fn_for(TRAIN), steps=2)
    for name in ("weight", "bias"):
        np.testing.assert_array_equal(
            getattr(resumed.dense_state["module"], name).detach().numpy(),
            getattr(once.dense_state["module"], name).detach().numpy(),
        )
    np.testing.assert_array_equal(resumed.get_variable_value("tbl_user"), once.get_variable_value("tbl_user"))


def test_train_op_reduction_is_mean_or_sum_and_changes_nothing_in_one_process():
    module = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(module.parameters(), lr=1.0)
    with pytest.raises(ValueError, match=r"Argument `reduction` must be 'mean' or 'sum'. Received: 'avg'."):
        torch_bridge.train_op(optimizer, reduction="avg")
    for reduction in ("mean", "sum"):  # one replica: the sum over replicas is the gradient itself
        before = module.weight.detach().clone()
        module(torch.ones(1, 2)).sum().backward()
        torch_bridge.train_op(optimizer, reduction=reduction)()
        np.testing.assert_allclose(module.weight.detach().numpy(), before.numpy() - 1.0)
        assert module.weight.grad is None  # zero_grad(set_to_none=True)
