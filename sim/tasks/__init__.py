"""Task families, one package each. :data:`TASKS` is the registry table: one line per task.

Importing this package imports no task module: ``sim.make(name)`` imports the module of that
task only (``sim.core.registry``). A new task adds its line here (name -> ``"module:Class"``);
the class declares ``task_name`` (the same name), ``cfg_class`` and the metadata hooks of
:class:`sim.core.env.MultiAgentEnv`.
"""

TASKS: dict[str, str] = {
    "cable_load": "sim.tasks.cable_load.env:CableLoadEnv",
    "drone_volleyball": "sim.tasks.drone_volleyball.env:DroneVolleyballEnv",
    "drone_volleyball_coplay": "sim.tasks.drone_volleyball.coplay:VolleyballCoplayEnv",
    "drone_volleyball_strategy": "sim.tasks.drone_volleyball.strategy:VolleyballStrategyEnv",
    "hepi_cloth_hanging": "sim.tasks.hepi.cloth:ClothHangingEnv",
    "hepi_insertion": "sim.tasks.hepi.insertion:InsertionEnv",
    "hepi_rope_closing": "sim.tasks.hepi.rope:RopeClosingEnv",
    "memory_reach": "sim.tasks.memory_reach.env:MemoryReachEnv",
    "pixel_reach": "sim.tasks.pixel_reach.env:PixelReachEnv",
    "point_reach": "sim.tasks.point_reach.env:PointReachEnv",
    "robot_soccer": "sim.tasks.robot_soccer.env:RobotSoccerEnv",
    "vlm_driving": "sim.tasks.vlm_driving.env:VLMDrivingEnv",
}
