import numpy as np

from dmllab.experiments.arrays import arrays_to_frame, frame_to_arrays


def test_round_trip_nested_arrays():
    data = {
        "x": np.arange(6.0).reshape(3, 2),
        "y": np.array([0.0, 1.0, 1.0]),
        "prob": {"0.5": np.eye(2)},
        "s": 3.0,
    }
    back = frame_to_arrays(arrays_to_frame(data))
    np.testing.assert_array_equal(back["x"], data["x"])
    np.testing.assert_array_equal(back["y"], data["y"])
    np.testing.assert_array_equal(back["prob"]["0.5"], np.eye(2))
    assert float(back["s"]) == 3.0
