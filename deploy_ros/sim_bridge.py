"""``python -m deploy_ros.sim_bridge``: starts the sim bridge, :mod:`sim.ros.bridge`.

The bridge runs the simulator (torch), so it lives on the simulator side; ``deploy_ros`` imports no ``sim``
module, and this entry point runs the bridge's module by name (a robot install cannot run it: it has no torch).
"""

import runpy

if __name__ == "__main__":
    runpy.run_module("sim.ros.bridge", run_name="__main__", alter_sys=True)
