"""Human labels: importers for published rating sets and a generic JSONL format."""

from appliance.labels.importers import FORMATS, read_labels
from appliance.labels.model import HumanLabel, LabelItem, LabelSet

__all__ = ["FORMATS", "HumanLabel", "LabelItem", "LabelSet", "read_labels"]
