"""Vocabulary and sentence templates for the product-review demo dataset.

Templates use ``{slot}`` fields filled by :func:`bench.datasets._text.render`. Aspect
templates are keyed by ``(topic, polarity)``; neutral templates never mention any aspect
topic (in particular never the battery or charging), so the gold labels stay exact.
"""

from __future__ import annotations

from typing import Final

CATEGORIES: Final[dict[str, tuple[str, ...]]] = {
    # category -> aspect topics a review of it can discuss
    "laptop": (
        "battery",
        "screen",
        "sound",
        "price",
        "support",
        "build",
        "performance",
        "keyboard",
    ),
    "phone": ("battery", "screen", "sound", "price", "support", "build", "performance", "camera"),
    "headset": ("battery", "sound", "price", "support", "build", "comfort", "connectivity"),
    "tablet": ("battery", "screen", "sound", "price", "support", "build", "performance"),
    "smartwatch": ("battery", "screen", "price", "support", "build", "comfort", "connectivity"),
    "speaker": ("battery", "sound", "price", "support", "build", "connectivity"),
    "e-reader": ("battery", "screen", "price", "support", "build", "comfort"),
}

BRANDS: Final = (
    "Aurora",
    "Nimbus",
    "Vertex",
    "Solace",
    "Kestrel",
    "Orion",
    "Lumen",
    "Halcyon",
    "Pinnacle",
    "Zephyr",
    "Tidewell",
    "Corvid",
)

PRODUCT_LINES: Final[dict[str, tuple[str, ...]]] = {
    "laptop": ("Book", "Air", "Studio", "Flex", "Pro"),
    "phone": ("P", "Edge", "Neo", "Mini", "Max"),
    "headset": ("ANC", "Buds", "Studio", "Arc", "Pulse"),
    "tablet": ("Tab", "Slate", "Pad", "Canvas"),
    "smartwatch": ("Watch", "Band", "Trek", "Fit"),
    "speaker": ("Boom", "Wave", "Cube", "Roam"),
    "e-reader": ("Page", "Ink", "Folio", "Leaf"),
}

MODEL_NUMBERS: Final = (
    "2",
    "3",
    "5",
    "7",
    "9",
    "12",
    "14",
    "15",
    "16",
    "300",
    "500",
    "X",
    "S",
    "Lite",
    "Plus",
    "2024",
    "II",
    "Go",
)

SLOTS: Final[dict[str, tuple[str, ...]]] = {
    "weeks": (
        "two weeks",
        "three weeks",
        "a month",
        "six weeks",
        "two months",
        "three months",
        "half a year",
        "about ten days",
    ),
    "reason": (
        "my old one finally gave up",
        "I needed something for travel",
        "a friend kept recommending it",
        "it was on sale during a holiday promotion",
        "I wanted an upgrade for work",
        "my previous device was getting sluggish",
        "I started a new job that requires more mobility",
        "I wanted to try a brand I had not used before",
    ),
    "who": (
        "a software developer",
        "a university student",
        "a freelance designer",
        "a nurse working night shifts",
        "a retired teacher",
        "a frequent traveller",
        "a parent of two",
        "a small-business owner",
        "a commuter",
        "someone who is not particularly techy",
    ),
    "compare": (
        "the device I had before",
        "my partner's older model",
        "the budget option I almost bought",
        "a friend's competing model",
        "the previous generation",
    ),
    "store": (
        "an online retailer",
        "the manufacturer's web store",
        "a local electronics shop",
        "a big-box store",
        "a refurbished marketplace",
    ),
    "days": ("two days", "three days", "four days", "a week", "a single day"),
    "colour": (
        "graphite",
        "silver",
        "midnight blue",
        "sand",
        "forest green",
        "black",
        "white",
        "rose",
    ),
    "minutes": ("ten minutes", "fifteen minutes", "twenty minutes", "half an hour"),
    "feature": (
        "the companion app",
        "the quick-start guide",
        "the settings menu",
        "the automatic update",
        "the account sign-in",
        "the pairing screen",
    ),
}

BATTERY_GOOD: Final[dict[str, tuple[str, ...]]] = {
    "laptop": ("eleven hours", "twelve hours", "nearly fourteen hours", "ten hours"),
    "phone": ("a day and a half", "two full days", "a full day", "thirty hours"),
    "headset": ("thirty hours", "forty hours", "thirty-five hours"),
    "tablet": ("twelve hours", "eleven hours", "fifteen hours"),
    "smartwatch": ("five days", "a full week", "four days"),
    "speaker": ("eighteen hours", "twenty hours", "a whole weekend"),
    "e-reader": ("five weeks", "a month", "six weeks"),
}
BATTERY_BAD: Final[dict[str, tuple[str, ...]]] = {
    "laptop": ("three hours", "four hours", "three and a half hours"),
    "phone": ("half a day", "six hours", "seven hours"),
    "headset": ("five hours", "six hours", "four hours"),
    "tablet": ("four hours", "five hours", "half a day"),
    "smartwatch": ("a single day", "twenty hours", "eighteen hours"),
    "speaker": ("four hours", "five hours", "three hours"),
    "e-reader": ("a week", "eight days", "nine days"),
}
USAGE: Final[dict[str, tuple[str, ...]]] = {
    "laptop": (
        "web browsing and document editing",
        "video calls",
        "light coding",
        "spreadsheets and email",
    ),
    "phone": ("mixed use", "streaming and navigation", "social media and photos"),
    "headset": ("listening with noise cancelling", "podcasts and calls", "loud music"),
    "tablet": ("video streaming", "reading and note-taking", "casual games"),
    "smartwatch": (
        "GPS workouts",
        "sleep tracking and notifications",
        "normal use with the always-on display",
    ),
    "speaker": ("playback at moderate volume", "outdoor use", "loud playback"),
    "e-reader": ("reading an hour a day", "reading with the light on", "nightly reading"),
}

ASPECT_TEMPLATES: Final[dict[tuple[str, str], tuple[str, ...]]] = {
    ("battery", "pos"): (
        "The battery is the standout: I routinely get {good_span} of {usage}.",
        "Battery life has been excellent, easily {good_span} before I think about a charger.",
        "I was worried about the battery, but it lasts {good_span} of {usage}, which is "
        "better than advertised.",
        "Charging is quick too, and a full battery carries me through {good_span}.",
        "Even with heavy {usage}, the battery keeps going for {good_span}.",
        "I have stopped carrying a charging cable around because {good_span} between "
        "charges is normal.",
        "Fifteen minutes on the charger gives me several more hours, which saved me more "
        "than once.",
        "The battery indicator is honest, and it still shows a healthy reserve at the end "
        "of a long day.",
        "Compared with {compare}, the battery life is in another league.",
    ),
    ("battery", "neg"): (
        "Battery life is the real letdown: it is empty after {bad_span} of {usage}.",
        "The battery drains far too fast, giving me {bad_span} at best.",
        "I never get more than {bad_span} of {usage} out of the battery, which is well "
        "below the advertised figure.",
        "The battery is a constant worry; after {bad_span} it is already begging for the charger.",
        "Charging takes ages and the battery is then gone after {bad_span}.",
        "With {usage}, the battery lasts only {bad_span}, so I carry a power bank.",
        "Even in standby the battery loses a noticeable chunk overnight.",
        "The battery percentage jumps around and sometimes drops from thirty to zero.",
        "Compared with {compare}, the battery life is a clear step backwards.",
    ),
    ("screen", "pos"): (
        "The display is gorgeous, with deep blacks and colours that look accurate.",
        "The screen is bright enough to read outdoors, even in direct sunlight.",
        "Text on the screen is razor sharp and the viewing angles are excellent.",
        "I love the display; scrolling is smooth and the brightness adjusts nicely.",
        "The screen is easily the best I have owned, crisp and evenly lit.",
        "Photos and videos look fantastic on the screen, with natural skin tones.",
        "The anti-glare coating on the display works better than I expected.",
        "Next to {compare}, the screen looks noticeably sharper and brighter.",
    ),
    ("screen", "neg"): (
        "The screen is dim and washed out, especially next to {compare}.",
        "I noticed uneven backlighting on the screen within the first week.",
        "The display has a noticeable blue tint that no setting fully fixes.",
        "The screen scratches far too easily; mine already has two marks.",
        "Glare on the display makes it hard to use near a window.",
        "The screen flickers at low brightness, which gives me headaches in the evening.",
        "Colours on the display look oversaturated and there is no way to tone them down.",
    ),
    ("sound", "pos"): (
        "Sound quality is excellent, with tight bass and clear vocals.",
        "Music sounds rich and detailed, much better than {compare}.",
        "The audio is balanced and stays clean even at high volume.",
        "I was surprised by how full the sound is for {a_device} of this size.",
        "Podcasts and calls sound crisp, and music has real depth.",
        "The stereo separation is wide and instruments are easy to pick out.",
        "The equaliser presets are useful, but honestly the default sound is already great.",
    ),
    ("sound", "neg"): (
        "The sound is tinny and the bass is almost absent.",
        "Audio distorts as soon as I push the volume past halfway.",
        "The sound is muddy, and vocals get lost behind the mids.",
        "Compared with {compare}, the audio is flat and lifeless.",
        "There is a faint hiss in quiet passages that I cannot unhear.",
        "Maximum volume is too low for anything but a quiet room.",
    ),
    ("price", "pos"): (
        "For the price, it is a real bargain.",
        "It costs noticeably less than competitors and does not feel cheap.",
        "At this price point, I honestly expected far less.",
        "I paid less than I did for {compare} and got more.",
        "Given what it costs, the value for money is hard to beat.",
    ),
    ("price", "neg"): (
        "It is simply overpriced for what you get.",
        "The price is hard to justify when competitors offer the same for much less.",
        "I feel I paid a premium for the brand name rather than the hardware.",
        "At this price I expected a lot more polish.",
        "Considering how much it costs, the accessories should have been included.",
        "It costs more than {compare} without being meaningfully better.",
        "A month after I bought it, the price was still far above similar models.",
    ),
    ("support", "pos"): (
        "Customer support was great: a real person answered within {minutes} and solved "
        "my question.",
        "When I contacted support about an account issue, they sorted it out the same day.",
        "The support team was friendly and followed up by email a few days later.",
        "The support chat was quick and the agent clearly knew the product.",
    ),
    ("support", "neg"): (
        "Customer support was a nightmare; I waited on hold for over an hour.",
        "I contacted support twice about a defect and got two different canned answers.",
        "Support kept asking me to reinstall everything and never escalated my ticket.",
        "The warranty claim took weeks and support stopped replying to my emails.",
        "Getting help from customer service was frustrating and slow.",
        "The support agent closed my ticket without solving anything.",
        "I was transferred between three support departments before someone listened.",
    ),
    ("build", "pos"): (
        "Build quality is superb; the {colour} finish feels solid and premium.",
        "It feels sturdy, with no creaks or flex anywhere.",
        "It survived a fall from a desk without a scratch.",
        "The materials feel premium and the fit and finish are excellent.",
        "The buttons have a satisfying click and nothing rattles.",
        "After {weeks} in a crowded bag, it still looks brand new.",
    ),
    ("build", "neg"): (
        "Build quality is poor: the casing creaks and one seam is already separating.",
        "After {weeks}, a hinge started to wobble.",
        "The plastic feels cheap, and the {colour} coating is already chipping.",
        "One of the buttons stopped clicking properly within a month.",
        "It feels fragile; I would not trust it in a bag without a case.",
        "A small crack appeared near the port even though I never dropped it.",
        "Something inside rattles when I shake it gently, which is not reassuring.",
    ),
    ("performance", "pos"): (
        "Performance is snappy; apps open instantly and multitasking is smooth.",
        "It handles everything I throw at it without slowing down.",
        "Even with dozens of tabs open, it never stutters.",
        "It stays cool and quiet even under a heavy workload.",
        "Switching between apps is instant, and nothing reloads unexpectedly.",
    ),
    ("performance", "neg"): (
        "Performance is sluggish, with noticeable lag when switching apps.",
        "It stutters with more than a handful of apps open.",
        "Apps regularly freeze for a second or two, which gets old quickly.",
        "It gets hot and noticeably slower after a few minutes of real work.",
        "Even scrolling through a long web page is not always smooth.",
    ),
    ("keyboard", "pos"): (
        "The keyboard is a joy to type on, with good travel and a quiet click.",
        "The trackpad is large and precise, and the keys are well spaced.",
        "The keyboard backlight is even and easy to adjust.",
    ),
    ("keyboard", "neg"): (
        "The keyboard feels mushy and a couple of keys register double presses.",
        "The trackpad is small and sometimes ignores taps.",
        "The arrow keys are cramped, which slows me down when editing.",
    ),
    ("camera", "pos"): (
        "The camera takes lovely photos, even in dim restaurants.",
        "Photos come out sharp with natural colours, and the video is stable.",
        "Portrait shots look natural and the focus is fast.",
    ),
    ("camera", "neg"): (
        "The camera struggles in low light and photos look smeared.",
        "Photos come out oversharpened with odd colours.",
        "The camera app is slow to open, so I miss spontaneous shots.",
    ),
    ("comfort", "pos"): (
        "It is comfortable enough to wear all day without noticing it.",
        "The fit is light and comfortable, even during long sessions.",
        "Nothing pinches or presses, even after several hours.",
    ),
    ("comfort", "neg"): (
        "It becomes uncomfortable after an hour and leaves marks.",
        "The fit is awkward and it gets warm quickly.",
        "It is heavier than it looks, and my hand gets tired holding it.",
    ),
    ("connectivity", "pos"): (
        "Pairing was instant and the connection never drops.",
        "Switching between my phone and laptop is seamless.",
        "The wireless range is impressive; it keeps working two rooms away.",
    ),
    ("connectivity", "neg"): (
        "The connection drops several times a day, even with the phone in my pocket.",
        "Pairing is unreliable and I often have to reset it.",
        "There is a noticeable delay between video and audio over the wireless link.",
    ),
}

INTRO: Final = (
    "I bought the {product} {weeks} ago because {reason}.",
    "I have been using the {product} for {weeks} now, after {reason}.",
    "As {who}, I picked up the {product} because {reason}.",
    "This review covers {weeks} of daily use of the {product}; I bought it because {reason}.",
    "After a lot of research I ordered the {product} from {store}, mostly because {reason}.",
)

NEUTRAL: Final = (
    "For context, I am {who}, so my needs may differ from yours.",
    "It arrived from {store} in {days}, well packed in a compact box.",
    "The {colour} version looks a bit different in person than in the photos.",
    "Setup took about {minutes}, most of it spent on {feature}.",
    "The box contains the {device}, a short cable and some paperwork.",
    "{feature} walked me through the first steps without any trouble.",
    "I use it every day at home and occasionally at the office.",
    "There was one software update in the first week, which installed without fuss.",
    "I have not tried every feature yet, so this review focuses on everyday use.",
    "My usage is fairly typical: messages, some video, and a bit of work.",
    "The {colour} colour was the only one in stock at {store}.",
    "The default settings were sensible, though I changed a few notifications.",
    "Registering the {device} took {minutes} because {feature} asked for many details.",
    "I did read other reviews beforehand, and they were mostly accurate.",
    "It took me a few days to get used to the layout of {feature}.",
    "I mainly use it in the evenings and on weekends.",
    "My household has a mix of brands, and it fits in without issues.",
    "I have owned several devices like this over the years, so I have some basis for comparison.",
    "The manual is short, but {feature} covers most of what you need.",
    "I ordered it on a weekday and it was on my doorstep {days} later.",
    "I went back and forth between this and {compare} for a while.",
    "Last weekend I took it on a short trip, and it came along without any drama.",
    "My teenager has borrowed it a few times and had no trouble figuring it out.",
    "I keep it on my desk most of the time, next to a stack of notebooks.",
    "The little details, like the way the menus are organised, took some getting used to.",
    "I bought a case for it separately, which I would suggest to anyone.",
    "Nothing about it required a trip to the manual after the first day.",
)

CONCLUSION: Final[dict[str, tuple[str, ...]]] = {
    "positive": (
        "Overall, I would happily recommend the {product} to anyone shopping for {a_device}.",
        "All in all, this is a great {device} and I would recommend it without hesitation.",
        "I would buy it again, and I have already recommended it to two friends.",
        "Highly recommended; it is the best {device} I have owned.",
    ),
    "negative": (
        "I cannot recommend the {product}; I am returning it.",
        "Save your money and look elsewhere; I regret this purchase.",
        "Unfortunately I would not recommend this {device} to anyone.",
        "Two stars at most, and I am already shopping for a replacement.",
    ),
    "mixed": (
        "It is a decent {device} with clear trade-offs, so weigh them against what you need.",
        "There is a lot to like and a lot to dislike; whether it suits you depends on your "
        "priorities.",
        "I am keeping it for now, but I have mixed feelings about it.",
        "It is neither great nor terrible, just an average {device} with strengths and flaws.",
    ),
}
