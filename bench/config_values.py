# Prints the values of the keys named (section.key) in a TOML run config, spaces apart, for the
# scripts of bench/ that shape a benchmark from a config.
#   python3 bench/config_values.py CONFIG model.n_layer model.d_model ...
import sys
import tomllib

path, keys = sys.argv[1], sys.argv[2:]
with open(path, "rb") as f:
    config = tomllib.load(f)
values = []
for key in keys:
    section, _, name = key.partition(".")
    if name not in config.get(section, {}):
        sys.exit(f"{path} has no {key} (a [{section}] key)")
    values.append(str(config[section][name]))
print(" ".join(values))
