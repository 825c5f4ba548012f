"""Two run directories trained from the same recipe (same name) never share one W&B run."""


def test_wandb_run_id_comes_from_the_run_directory(tmp_path):
    from midtrain.train.logger import wandb_run_id

    a, b = wandb_run_id("demo_tiny", tmp_path / "a"), wandb_run_id("demo_tiny", tmp_path / "b")
    assert a != b and a.startswith("demo_tiny-")  # same recipe name, two runs
    assert wandb_run_id("demo_tiny", tmp_path / "a" / ".." / "a") == a  # a restart resumes the same run
    assert set(wandb_run_id("x/y z", tmp_path)) <= set("abcdefghijklmnopqrstuvwxyz0123456789-_xyz")
