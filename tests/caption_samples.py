"""Real-shaped long captions the summary tests share."""

from __future__ import annotations

CAPTIONS = {
    "llm": [
        "The image captures a bustling city street at dusk, lined with shops and a red tram. "
        "The tram is stopped at a platform on the left side of the street. "
        "Its windows glow with warm yellow light. "
        "On the right, a woman in a blue coat waits at the crossing. "
        "Above the shops, neon signs in pink and green flicker against the darkening sky.",
        "A golden retriever lies on a wooden porch beside a blue ceramic bowl. "
        "The dog's fur is thick and slightly wavy, shining in the afternoon sun. "
        "Its head rests on its front paws, and its eyes are half closed. "
        "The bowl is filled with water and sits near the edge of the porch. "
        "Behind the dog, a white screen door is partly open.",
    ],
    "human": [
        "In a medium eye-level shot, a vintage green bicycle leans against a brick wall beside a wooden bench. "
        "The bicycle has a brown leather saddle and a wicker basket on the front. "
        "Its tires are worn and the chain is slightly rusted. "
        "The bench is weathered and gray, with peeling paint on the armrest. "
        "Ivy climbs the wall in the top right corner.",
        "A close-up shot shows a white ceramic mug of coffee on a marble table next to an open notebook. "
        "The coffee is dark with a thin ring of foam near the rim. "
        "The notebook's pages are filled with handwritten notes in blue ink. "
        "A silver pen lies across the notebook. "
        "To the left, a small plant in a terracotta pot is partly visible.",
    ],
}
