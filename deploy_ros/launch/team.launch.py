"""ROS 2 launch file of a covey team (needs a full ROS 2 install: ``launch``, ``launch_ros``).

    ros2 launch deploy_ros/launch/team.launch.py task:=cable_load                     # sim bridge + policies
    ros2 launch deploy_ros/launch/team.launch.py task:=cable_load with_bridge:=false  # on the robots

Run from the repository root with covey pip-installed. Starts exactly the nodes
``python -m deploy_ros.launch <task>`` starts (``deploy_ros.launch.node_commands``), with the
parameters of ``deploy_ros/params/<task>.yaml``.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess, OpaqueFunction
from launch.substitutions import LaunchConfiguration

from deploy_ros.launch import node_commands, params_file


def _nodes(context, *args, **kwargs):
    task = LaunchConfiguration("task").perform(context)
    with_bridge = LaunchConfiguration("with_bridge").perform(context).lower() in ("1", "true", "yes")
    cmds = node_commands(params_file(task), with_bridge=with_bridge)
    return [ExecuteProcess(cmd=cmd, name=name, output="screen") for name, cmd in cmds.items()]


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription(
        [
            DeclareLaunchArgument("task", description="the parameter file deploy_ros/params/<task>.yaml"),
            DeclareLaunchArgument("with_bridge", default_value="true", description="start the sim bridge"),
            OpaqueFunction(function=_nodes),
        ]
    )
