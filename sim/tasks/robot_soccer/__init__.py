"""robot_soccer: batched MuJoCo soccer of small robots, state experts and egocentric-vision agents (see env.py)."""
