"""caption-debias: long-caption data preparation and DeBias-CLIP fine-tuning."""

__version__ = "0.1.0"
