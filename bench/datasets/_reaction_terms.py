"""A MedDRA-like vocabulary of adverse-reaction terms, built combinatorially.

Three families, each deterministic and in a fixed order:

- :data:`COMMON_TERMS`: familiar adverse drug reaction terms ("Thrombocytopenia").
- laboratory terms: ``"<analyte> increased|decreased|abnormal"``
  ("Blood creatinine increased").
- site terms: ``"[<qualifier>] <site> <condition>"`` where the condition suits the kind
  of site ("Acute hepatic failure", "Drug-induced gastric ulcer").

:func:`all_terms` returns them de-duplicated; :func:`mention` turns a term into the
phrase an article uses for it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final

COMMON_TERMS: Final = (
    "Nausea",
    "Vomiting",
    "Diarrhoea",
    "Constipation",
    "Headache",
    "Dizziness",
    "Somnolence",
    "Insomnia",
    "Fatigue",
    "Pyrexia",
    "Rash",
    "Pruritus",
    "Urticaria",
    "Angioedema",
    "Anaphylactic reaction",
    "Stevens-Johnson syndrome",
    "Toxic epidermal necrolysis",
    "Drug reaction with eosinophilia and systemic symptoms",
    "Agranulocytosis",
    "Neutropenia",
    "Febrile neutropenia",
    "Thrombocytopenia",
    "Pancytopenia",
    "Anaemia",
    "Haemolytic anaemia",
    "Hyperkalaemia",
    "Hypokalaemia",
    "Hyponatraemia",
    "Hypoglycaemia",
    "Hyperglycaemia",
    "Lactic acidosis",
    "Diabetic ketoacidosis",
    "Rhabdomyolysis",
    "Serotonin syndrome",
    "Neuroleptic malignant syndrome",
    "Seizure",
    "Confusional state",
    "Delirium",
    "Hallucination",
    "Tremor",
    "Peripheral sensory neuropathy",
    "Torsade de pointes",
    "Electrocardiogram QT prolonged",
    "Bradycardia",
    "Tachycardia",
    "Atrial fibrillation",
    "Hypotension",
    "Hypertension",
    "Syncope",
    "Dyspnoea",
    "Bronchospasm",
    "Interstitial lung disease",
    "Pneumonitis",
    "Cough",
    "Alopecia",
    "Photosensitivity reaction",
    "Arthralgia",
    "Myalgia",
    "Tendon rupture",
    "Osteonecrosis of jaw",
    "Pancreatitis",
    "Hepatitis",
    "Cholestasis",
    "Jaundice",
    "Acute kidney injury",
    "Nephrotic syndrome",
    "Tubulointerstitial nephritis",
    "Hypothyroidism",
    "Hyperthyroidism",
    "Adrenal insufficiency",
    "Colitis",
    "Gastrointestinal haemorrhage",
    "Oedema peripheral",
    "Drug-induced liver injury",
    "Posterior reversible encephalopathy syndrome",
    "Progressive multifocal leukoencephalopathy",
    "Capillary leak syndrome",
    "Cytokine release syndrome",
    "Infusion related reaction",
    "Injection site reaction",
    "Sepsis",
    "Pneumonia",
    "Oral candidiasis",
    "Herpes zoster",
    "Tumour lysis syndrome",
    "Deep vein thrombosis",
    "Pulmonary embolism",
    "Myocarditis",
    "Cardiac failure",
    "Myocardial infarction",
    "Cerebrovascular accident",
    "Hypersensitivity",
    "Lupus-like syndrome",
    "Vasculitis",
    "Visual impairment",
    "Tinnitus",
    "Hearing loss",
    "Dysgeusia",
    "Stomatitis",
    "Mucosal inflammation",
    "Hand-foot syndrome",
    "Hypomagnesaemia",
    "Hypocalcaemia",
    "Hypercalcaemia",
    "Encephalopathy",
    "Aseptic meningitis",
    "Guillain-Barre syndrome",
    "Myasthenia gravis",
    "Hyperammonaemia",
    "Hepatic encephalopathy",
    "Ototoxicity",
    "Nephrogenic diabetes insipidus",
    "Priapism",
    "Gynaecomastia",
    "Weight increased",
    "Weight decreased",
)

ANALYTES: Final = (
    "Alanine aminotransferase",
    "Aspartate aminotransferase",
    "Blood bilirubin",
    "Blood creatinine",
    "Blood urea",
    "Blood potassium",
    "Blood sodium",
    "Blood glucose",
    "Platelet count",
    "White blood cell count",
    "Neutrophil count",
    "Haemoglobin",
    "Blood pressure",
    "Heart rate",
    "Body temperature",
    "Blood lactate",
    "Lipase",
    "Amylase",
    "Blood creatine phosphokinase",
    "Troponin",
    "International normalised ratio",
    "Prothrombin time",
    "Gamma-glutamyltransferase",
    "Blood alkaline phosphatase",
    "Lymphocyte count",
    "Eosinophil count",
    "Blood calcium",
    "Blood magnesium",
    "Blood phosphorus",
    "Blood albumin",
    "Blood thyroid stimulating hormone",
    "Blood cholesterol",
    "Blood triglycerides",
    "Ejection fraction",
    "Oxygen saturation",
    "Blood uric acid",
    "Ammonia",
    "C-reactive protein",
    "Red blood cell sedimentation rate",
    "Haematocrit",
    "Red blood cell count",
    "Reticulocyte count",
    "Blood ketone body",
    "Urine output",
    "Glomerular filtration rate",
    "Blood cortisol",
    "Drug level",
    "Hepatic enzyme",
    "Transaminases",
    "Blood lactate dehydrogenase",
)
LAB_DIRECTIONS: Final = ("increased", "decreased", "abnormal")

# Site adjectives by kind of site; conditions by kind.
SITES: Final[dict[str, tuple[str, ...]]] = {
    "organ": (
        "hepatic",
        "renal",
        "pancreatic",
        "splenic",
        "thyroid",
        "adrenal",
        "cardiac",
        "pulmonary",
        "cerebral",
        "cerebellar",
        "ovarian",
        "testicular",
        "prostatic",
        "pituitary",
        "parotid",
        "myocardial",
    ),
    "hollow": (
        "gastric",
        "duodenal",
        "oesophageal",
        "colonic",
        "intestinal",
        "rectal",
        "biliary",
        "gallbladder",
        "bladder",
        "ileal",
        "jejunal",
        "uterine",
        "laryngeal",
        "tracheal",
        "bronchial",
        "nasal",
        "urethral",
        "ureteric",
        "vaginal",
        "anal",
    ),
    "serosa": ("pleural", "pericardial", "peritoneal", "synovial", "meningeal"),
    "vessel": (
        "arterial",
        "venous",
        "aortic",
        "coronary artery",
        "mesenteric",
        "renal artery",
        "carotid artery",
        "pulmonary artery",
        "jugular vein",
        "portal vein",
    ),
    "nerve": ("peripheral nerve", "optic nerve", "spinal cord", "facial nerve", "cranial nerve"),
    "tissue": (
        "skin",
        "subcutaneous",
        "muscle",
        "tendon",
        "joint",
        "bone",
        "bone marrow",
        "lymph node",
        "oral mucosal",
        "gingival",
        "ocular",
        "corneal",
        "retinal",
        "conjunctival",
        "vestibular",
        "cochlear",
        "breast",
        "endometrial",
        "fascial",
        "cartilage",
        "dental",
        "nail",
    ),
    "region": (
        "hand",
        "foot",
        "face",
        "lip",
        "tongue",
        "eyelid",
        "scalp",
        "neck",
        "chest wall",
        "abdominal wall",
        "back",
        "knee",
        "hip",
        "shoulder",
        "elbow",
        "wrist",
        "ankle",
        "groin",
        "axillary",
        "perineal",
        "finger",
        "toe",
        "jaw",
        "ear",
        "buttock",
    ),
}
CONDITIONS: Final[dict[str, tuple[str, ...]]] = {
    "organ": (
        "failure",
        "injury",
        "necrosis",
        "fibrosis",
        "abscess",
        "cyst",
        "haemorrhage",
        "infarction",
        "insufficiency",
        "impairment",
        "enlargement",
        "atrophy",
        "inflammation",
        "oedema",
        "calcification",
        "toxicity",
        "dysfunction",
        "neoplasm",
        "lesion",
        "disorder",
        "mass",
        "pain",
    ),
    "hollow": (
        "ulcer",
        "perforation",
        "haemorrhage",
        "obstruction",
        "stenosis",
        "inflammation",
        "dilatation",
        "fistula",
        "necrosis",
        "polyp",
        "ischaemia",
        "spasm",
        "erosion",
        "disorder",
        "pain",
        "wall thickening",
    ),
    "vessel": (
        "thrombosis",
        "embolism",
        "stenosis",
        "dissection",
        "aneurysm",
        "occlusion",
        "rupture",
        "spasm",
        "inflammation",
        "haemorrhage",
        "insufficiency",
        "calcification",
    ),
    "serosa": (
        "effusion",
        "inflammation",
        "fibrosis",
        "haemorrhage",
        "thickening",
        "calcification",
        "adhesion",
        "pain",
    ),
    "nerve": (
        "injury",
        "disorder",
        "inflammation",
        "degeneration",
        "compression",
        "paralysis",
        "lesion",
        "atrophy",
        "ischaemia",
    ),
    "tissue": (
        "pain",
        "inflammation",
        "necrosis",
        "atrophy",
        "haemorrhage",
        "swelling",
        "infection",
        "disorder",
        "lesion",
        "oedema",
        "abscess",
        "ulcer",
        "hypertrophy",
    ),
    "region": (
        "pain",
        "swelling",
        "oedema",
        "erythema",
        "rash",
        "haematoma",
        "lesion",
        "ulcer",
        "abscess",
        "inflammation",
        "injury",
        "numbness",
        "discomfort",
        "mass",
        "stiffness",
        "burning sensation",
    ),
}
_GENERAL: Final = frozenset(
    {
        "failure",
        "injury",
        "necrosis",
        "fibrosis",
        "abscess",
        "haemorrhage",
        "infarction",
        "insufficiency",
        "impairment",
        "enlargement",
        "atrophy",
        "inflammation",
        "oedema",
        "calcification",
        "toxicity",
        "dysfunction",
        "lesion",
        "disorder",
        "pain",
        "ulcer",
        "perforation",
        "obstruction",
        "stenosis",
        "dilatation",
        "fistula",
        "ischaemia",
        "spasm",
        "erosion",
        "wall thickening",
        "thrombosis",
        "embolism",
        "dissection",
        "occlusion",
        "rupture",
        "degeneration",
        "compression",
        "paralysis",
        "swelling",
        "infection",
        "hypertrophy",
        "effusion",
        "thickening",
        "adhesion",
        "erythema",
        "rash",
        "haematoma",
        "numbness",
        "discomfort",
        "stiffness",
        "burning sensation",
    }
)
_DAMAGE: Final = frozenset(
    {
        "inflammation",
        "injury",
        "disorder",
        "dysfunction",
        "failure",
        "necrosis",
        "fibrosis",
        "degeneration",
        "paralysis",
        "atrophy",
        "lesion",
        "insufficiency",
        "impairment",
    }
)
_EXTENT: Final = frozenset(
    {
        "necrosis",
        "fibrosis",
        "inflammation",
        "lesion",
        "oedema",
        "haemorrhage",
        "atrophy",
        "calcification",
        "wall thickening",
        "infarction",
        "ischaemia",
        "swelling",
        "erosion",
        "ulcer",
        "thickening",
        "erythema",
        "rash",
    }
)
QUALIFIERS: Final[dict[str, frozenset[str]]] = {
    # qualifier -> the conditions it combines with
    "acute": _GENERAL
    - {
        "calcification",
        "hypertrophy",
        "enlargement",
        "atrophy",
        "fibrosis",
        "degeneration",
        "wall thickening",
    },
    "chronic": _GENERAL - {"rupture", "perforation", "dissection", "embolism", "infarction"},
    "subacute": _DAMAGE | {"haemorrhage", "infarction", "thrombosis", "infection"},
    "recurrent": frozenset(
        {
            "haemorrhage",
            "ulcer",
            "thrombosis",
            "embolism",
            "infection",
            "abscess",
            "spasm",
            "pain",
            "inflammation",
            "obstruction",
            "swelling",
            "erosion",
            "fistula",
            "effusion",
            "rash",
            "erythema",
            "haematoma",
        }
    ),
    "progressive": _DAMAGE
    | {
        "stenosis",
        "calcification",
        "dilatation",
        "enlargement",
        "hypertrophy",
        "wall thickening",
        "compression",
        "thickening",
        "stiffness",
        "numbness",
        "effusion",
    },
    "severe": _GENERAL,
    "drug-induced": _DAMAGE
    | {
        "toxicity",
        "ulcer",
        "haemorrhage",
        "oedema",
        "thrombosis",
        "spasm",
        "pain",
        "swelling",
        "erosion",
        "hypertrophy",
        "effusion",
        "rash",
        "erythema",
        "numbness",
        "haematoma",
    },
    "immune-mediated": _DAMAGE - {"paralysis"},
    "autoimmune": frozenset(
        {
            "inflammation",
            "disorder",
            "dysfunction",
            "insufficiency",
            "failure",
            "degeneration",
            "atrophy",
        }
    ),
    "allergic": frozenset(
        {"inflammation", "oedema", "swelling", "disorder", "lesion", "rash", "erythema"}
    ),
    "toxic": _DAMAGE - {"paralysis", "fibrosis"},
    "fulminant": frozenset({"failure", "necrosis", "inflammation", "infection", "haemorrhage"}),
    "focal": _EXTENT,
    "diffuse": _EXTENT - {"ulcer"},
    "haemorrhagic": frozenset(
        {"necrosis", "infarction", "inflammation", "ulcer", "erosion", "cyst", "lesion", "effusion"}
    ),
    "ischaemic": frozenset(
        {"injury", "necrosis", "lesion", "dysfunction", "ulcer", "pain", "stenosis"}
    ),
    "infectious": frozenset({"inflammation", "necrosis", "lesion", "ulcer", "disorder"}),
    "obstructive": frozenset({"failure", "injury", "dilatation", "pain", "inflammation"}),
    "non-infectious": frozenset({"inflammation", "disorder", "lesion"}),
}


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def lab_terms() -> list[str]:
    """``"<analyte> <direction>"`` for every analyte and direction, in a fixed order."""
    return [f"{a} {d}" for a in ANALYTES for d in LAB_DIRECTIONS]


def site_terms() -> list[str]:
    """``"[<qualifier>] <site> <condition>"`` for compatible pairs, in a fixed order."""
    terms = []
    for kind, sites in SITES.items():
        for site in sites:
            for condition in CONDITIONS[kind]:
                terms.append(_capital(f"{site} {condition}"))
                terms += [
                    _capital(f"{q} {site} {condition}")
                    for q, allowed in QUALIFIERS.items()
                    if condition in allowed
                ]
    return terms


@lru_cache(maxsize=1)
def all_terms() -> tuple[str, ...]:
    """Every term: common ones, then laboratory, then site terms; no duplicates."""
    return tuple(dict.fromkeys([*COMMON_TERMS, *lab_terms(), *site_terms()]))


def is_featured(term: str) -> bool:
    """True for common and laboratory terms, which articles use most as gold labels."""
    return term in _featured()


@lru_cache(maxsize=1)
def _featured() -> frozenset[str]:
    return frozenset([*COMMON_TERMS, *lab_terms()])


def mention(term: str) -> str:
    """The phrase an article uses for ``term``.

    Laboratory terms read naturally reversed ("increased blood creatinine"); other terms
    are lower-cased at the start unless they begin with a proper name or an acronym.
    """
    for direction in LAB_DIRECTIONS:
        suffix = f" {direction}"
        if term.endswith(suffix) and term[: -len(suffix)] in _analytes():
            return f"{direction} {_lower_start(term[: -len(suffix)])}"
    return _lower_start(term)


@lru_cache(maxsize=1)
def _analytes() -> frozenset[str]:
    return frozenset(ANALYTES)


_PROPER_STARTS: Final = ("Stevens-Johnson", "Guillain-Barre", "C-reactive", "Electrocardiogram QT")


def _lower_start(text: str) -> str:
    if text.startswith(_PROPER_STARTS) or (len(text) > 1 and text[1].isupper()):
        return text
    return text[:1].lower() + text[1:]
