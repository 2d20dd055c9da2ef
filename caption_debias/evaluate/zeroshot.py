"""Zero-shot classification over a folder-per-class image set with the standard CLIP templates.

Loading is torchvision's ImageFolder; the class embeddings are open_clip's own
build_zero_shot_classifier (template features normalised, averaged, renormalised).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from caption_debias.errors import UserError
from caption_debias.evaluate.metrics import text_to_image_ranks
from caption_debias.evaluate.retrieval import model_device
from caption_debias.progress import active, add_work, advance, begin, end, phase

TEMPLATE_SETS = ("openai", "simple")


def templates(name: str = "openai") -> Sequence:
    from open_clip.zero_shot_metadata import OPENAI_IMAGENET_TEMPLATES, SIMPLE_IMAGENET_TEMPLATES

    if name not in TEMPLATE_SETS:
        raise UserError(f"unknown template set {name!r} (choose from {', '.join(TEMPLATE_SETS)})")
    return OPENAI_IMAGENET_TEMPLATES if name == "openai" else SIMPLE_IMAGENET_TEMPLATES


def class_name(folder: str) -> str:
    """Folder name -> the words put into the templates ('golden_retriever' -> 'golden retriever')."""
    return folder.replace("_", " ").replace("-", " ").strip()


def zeroshot(
    loaded, root: str | Path, template_set: str = "openai", batch_size: int = 64, workers: int = 0, hits: bool = False
) -> dict[str, Any]:
    """{'top1', 'top5' (percent), 'classes', 'images'}; ties count against the image, as in retrieval.
    `hits`: also 'top1_hits', each image's hit at 1 in folder order (what a paired bootstrap resamples)."""
    import torch
    from open_clip.zero_shot_classifier import build_zero_shot_classifier
    from torchvision.datasets import ImageFolder

    root = Path(root)
    if not root.is_dir():
        raise UserError(f"{root}: no such folder (zero-shot needs one sub-folder per class)")
    try:
        dataset = ImageFolder(str(root), transform=loaded.preprocess)
    except (FileNotFoundError, RuntimeError) as exc:
        raise UserError(f"{root}: not a folder-per-class image set ({str(exc).splitlines()[0]})") from None
    if len(dataset.classes) < 2:
        raise UserError(f"{root}: zero-shot needs at least two class folders")
    device = model_device(loaded)
    loaded.model.eval()
    with torch.inference_mode():
        classifier = build_zero_shot_classifier(
            loaded.model,
            loaded.tokenizer,
            [class_name(c) for c in dataset.classes],
            templates(template_set),
            num_classes_per_batch=10,
            device=device,
            use_tqdm=False,
        ).float()  # [D, C]
        ranks = []
        counted = active()
        if counted is not None and counted.phases:  # eval's rows: this folder's images join the total
            counted.add_work(len(dataset))
        begin(len(dataset), ["encoding images"])  # its rows: one image each
        phase("encoding images")
        add_work(len(dataset))
        loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, num_workers=workers)
        batches = iter(loader)
        while True:
            try:
                images, labels = next(batches)
            except StopIteration:
                break
            except OSError as exc:  # PIL cannot read an image file
                raise UserError(f"{root}: unreadable image ({exc})") from None
            feats = torch.nn.functional.normalize(loaded.model.encode_image(images.to(device)).float(), dim=-1)
            ranks.append(text_to_image_ranks(feats @ classifier, labels.to(device)).cpu())
            advance(len(images))
        end()
    ranks = torch.cat(ranks)
    result: dict[str, Any] = {
        "top1": 100.0 * float((ranks < 1).double().mean()),
        "top5": 100.0 * float((ranks < 5).double().mean()),
        "classes": len(dataset.classes),
        "images": len(dataset),
    }
    if hits:
        result["top1_hits"] = [int(r) for r in (ranks < 1).tolist()]
    return result
