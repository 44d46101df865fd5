"""``python -m training.rewards.train_image_tower``: the former name of ``python -m sim.rewards.train_image_tower``."""

import sys

from sim.rewards.train_image_tower import main

if __name__ == "__main__":
    main(sys.argv[1:])
