"""Drugs and sentence templates for the BioDEX-shaped case-report articles.

Slots: ``{drug}``, ``{drug_class}`` (``{a_drug_class}`` with its article),
``{indication}``, ``{dose}``, ``{a_age}`` ("a 54" or "an 84"), ``{sex}``,
``{He}``/``{he}``/``{his}``/``{him}`` (pronouns), ``{onset}`` (days), ``{reaction}`` (one
of the patient's reactions, as mentioned in text), ``{reactions}`` (all of them, as a
list), ``{other}`` (a reaction the patient did *not* have) and the filler pools in
:data:`SLOTS`.

Sentences in :data:`BACKGROUND` and :data:`DISCUSSION` may name ``{other}`` reactions only
as known effects of the drug class or as excluded diagnoses, never as the patient's.
"""

from __future__ import annotations

from typing import Final

# Indications that fix the patient's sex.
FEMALE_ONLY: Final = frozenset({"ovarian carcinoma"})

# generic name, class, indication, dose
DRUGS: Final = (
    ("methotrexate", "antimetabolite", "rheumatoid arthritis", "15 mg once weekly"),
    ("amiodarone", "class III antiarrhythmic", "atrial fibrillation", "200 mg daily"),
    ("carbamazepine", "anticonvulsant", "focal epilepsy", "200 mg twice daily"),
    (
        "vancomycin",
        "glycopeptide antibiotic",
        "methicillin-resistant Staphylococcus aureus bacteraemia",
        "1 g every 12 hours",
    ),
    ("nivolumab", "immune checkpoint inhibitor", "metastatic melanoma", "240 mg every two weeks"),
    (
        "pembrolizumab",
        "immune checkpoint inhibitor",
        "non-small cell lung cancer",
        "200 mg every three weeks",
    ),
    ("clozapine", "atypical antipsychotic", "treatment-resistant schizophrenia", "300 mg daily"),
    ("lithium", "mood stabiliser", "bipolar disorder", "900 mg daily"),
    ("allopurinol", "xanthine oxidase inhibitor", "chronic gout", "300 mg daily"),
    ("cisplatin", "platinum compound", "ovarian carcinoma", "75 mg/m2 every three weeks"),
    ("linezolid", "oxazolidinone antibiotic", "chronic osteomyelitis", "600 mg twice daily"),
    ("valproate", "anticonvulsant", "generalised epilepsy", "1000 mg daily"),
    ("isoniazid", "antituberculosis agent", "latent tuberculosis infection", "300 mg daily"),
    (
        "tacrolimus",
        "calcineurin inhibitor",
        "kidney transplantation",
        "0.1 mg/kg daily in two doses",
    ),
    ("warfarin", "vitamin K antagonist", "mechanical mitral valve replacement", "5 mg daily"),
    ("levofloxacin", "fluoroquinolone", "community-acquired pneumonia", "750 mg daily"),
    (
        "sertraline",
        "selective serotonin reuptake inhibitor",
        "major depressive disorder",
        "100 mg daily",
    ),
    ("metformin", "biguanide", "type 2 diabetes mellitus", "1000 mg twice daily"),
    ("atorvastatin", "HMG-CoA reductase inhibitor", "hypercholesterolaemia", "80 mg daily"),
    (
        "rituximab",
        "anti-CD20 monoclonal antibody",
        "diffuse large B-cell lymphoma",
        "375 mg/m2 per cycle",
    ),
    (
        "infliximab",
        "tumour necrosis factor inhibitor",
        "Crohn disease",
        "5 mg/kg at weeks 0, 2 and 6",
    ),
    ("lamotrigine", "anticonvulsant", "bipolar depression", "100 mg daily"),
    ("capecitabine", "fluoropyrimidine", "metastatic colorectal cancer", "1250 mg/m2 twice daily"),
    ("haloperidol", "typical antipsychotic", "acute delirium", "5 mg intramuscularly"),
    (
        "ciprofloxacin",
        "fluoroquinolone",
        "complicated urinary tract infection",
        "500 mg twice daily",
    ),
    (
        "enalapril",
        "angiotensin-converting enzyme inhibitor",
        "essential hypertension",
        "10 mg daily",
    ),
    ("cyclophosphamide", "alkylating agent", "lupus nephritis", "500 mg/m2 monthly"),
    (
        "empagliflozin",
        "sodium-glucose cotransporter-2 inhibitor",
        "type 2 diabetes mellitus",
        "10 mg daily",
    ),
    ("propylthiouracil", "thionamide", "Graves disease", "100 mg three times daily"),
    (
        "bevacizumab",
        "anti-VEGF monoclonal antibody",
        "recurrent glioblastoma",
        "10 mg/kg every two weeks",
    ),
)

SLOTS: Final[dict[str, tuple[str, ...]]] = {
    "journal_year": ("2009", "2012", "2014", "2016", "2018", "2019", "2020", "2021", "2022"),
    "database": ("PubMed", "Embase", "MEDLINE", "Web of Science", "Scopus"),
    "score": ("6", "7", "8", "5"),
    "weeks": ("two weeks", "three weeks", "four weeks", "six weeks", "two months"),
    "comorbidity": (
        "hypertension",
        "type 2 diabetes mellitus",
        "chronic obstructive pulmonary disease",
        "hypothyroidism",
        "osteoarthritis",
        "gastro-oesophageal reflux disease",
        "obesity",
        "asthma",
    ),
    "co_drug": (
        "omeprazole",
        "amlodipine",
        "paracetamol",
        "levothyroxine",
        "salbutamol inhaler",
        "simvastatin",
        "folic acid",
        "vitamin D",
    ),
    "author": (
        "Nakamura",
        "Okafor",
        "Schmidt",
        "Rossi",
        "Kowalski",
        "Haddad",
        "Lindqvist",
        "Dubois",
        "Moreno",
        "Chen",
        "Patel",
        "Ivanova",
        "Ferreira",
        "O'Brien",
        "Andersen",
        "Takahashi",
        "Mensah",
        "Kaur",
        "Novak",
        "Yilmaz",
    ),
    "mechanism": (
        "direct cellular toxicity",
        "an idiosyncratic immune-mediated response",
        "mitochondrial dysfunction",
        "a delayed-type hypersensitivity reaction",
        "accumulation of a toxic metabolite",
        "genetic variation in drug metabolism",
    ),
    "test": (
        "complete blood count",
        "serum electrolytes",
        "liver function tests",
        "renal function tests",
        "coagulation studies",
        "urinalysis",
    ),
    "country": (
        "Japan",
        "Germany",
        "Brazil",
        "Canada",
        "India",
        "Italy",
        "Spain",
        "the United States",
        "Korea",
        "France",
    ),
}

TITLES: Final = (
    "{Reaction} associated with {drug} in a patient with {indication}: a case report",
    "{Drug}-induced {reaction}: case report and review of the literature",
    "Severe {reaction} following {drug} therapy",
    "An unusual presentation of {reaction} during treatment with {drug}",
    "{Reaction} after initiation of {drug}: a case report",
)

ABSTRACT: Final = (
    "We report the case of {a_age}-year-old {sex} with {indication} who developed "
    "{reactions} after starting {drug}.",
    "{Drug} is a widely used {drug_class}, and serious adverse reactions are uncommon.",
    "{Reactions} developed {onset} days after the first dose and resolved after the drug "
    "was withdrawn.",
    "Clinicians should be aware of this potential adverse effect of {drug}.",
)

BACKGROUND: Final = (
    "{Drug} is {a_drug_class} that is commonly prescribed for {indication}.",
    "Since its introduction, {drug} has become a cornerstone of treatment for "
    "{indication} in many countries.",
    "The efficacy of {drug} has been demonstrated in several randomised controlled trials.",
    "Known adverse effects of {drug_class} agents include {other}, which usually occurs "
    "early in treatment.",
    "Post-marketing surveillance has linked {drug} to {other} in a small number of patients.",
    "The product label lists {other} as an uncommon adverse reaction.",
    "Most adverse events associated with {drug} are mild and resolve with dose reduction.",
    "Pharmacovigilance databases remain an important source of information on rare "
    "reactions to {drug}.",
    "The pharmacokinetics of {drug} vary considerably between individuals.",
    "Elderly patients and those with renal impairment may be at higher risk of adverse effects.",
    "Few cases of {reaction} have been attributed to {drug} in the published literature.",
    "The mechanisms underlying serious reactions to {drug} are incompletely understood.",
    "Careful monitoring is recommended during the first months of treatment with {drug}.",
    "Drug interactions may increase exposure to {drug} and the risk of toxicity.",
    "Here we describe a patient in whom {drug} was the most likely cause of {reaction}.",
)

METHODS: Final = (
    "We searched {database} from inception to {journal_year} for reports of {reaction} "
    "associated with {drug}.",
    "Search terms included the generic and brand names of {drug} combined with terms for "
    "adverse reactions.",
    "Reference lists of the retrieved articles were screened for additional reports.",
    "Causality was assessed with the Naranjo adverse drug reaction probability scale.",
    "Written informed consent for publication was obtained from the patient.",
    "Only reports published in English with sufficient clinical detail were included.",
    "Two reviewers independently extracted the patient characteristics, drug exposure and "
    "outcome of each case.",
    "Disagreements between reviewers were resolved by discussion.",
)

CASE_REQUIRED: Final = (
    "{A_age}-year-old {sex} with a history of {indication} and {comorbidity} was started "
    "on {drug} {dose}.",
    "{onset} days after the first dose, {he} presented with {reactions}.",
    "{Drug} was discontinued on admission.",
)
CASE_REACTION: Final = (
    "Investigations confirmed {reaction}.",
    "The clinical picture was consistent with {reaction}.",
    "A diagnosis of {reaction} was made.",
    "Further work-up revealed {reaction}.",
)
# Case-presentation filler by phase: history, examination and tests, course.
CASE_HISTORY: Final = (
    "{His} other medications were {co_drug} and {co_drug2}, both taken for several years "
    "without problems.",
    "{He} had no known drug allergies.",
    "{He} did not smoke and drank alcohol only occasionally.",
    "No dose adjustment had been made in the weeks before presentation.",
    "Adherence to the prescribed regimen was confirmed by the family.",
    "{He} reported no recent travel, infection or use of herbal supplements.",
    "{His} {indication} had been stable for several months before the change in therapy.",
)
CASE_FINDINGS: Final = (
    "On examination, {he} was alert but appeared unwell.",
    "Vital signs on arrival showed a heart rate of 104 beats per minute and a temperature "
    "of 37.9 C.",
    "A {test} was requested on admission.",
    "Blood cultures and a viral screen were negative.",
    "Imaging of the chest and abdomen showed no alternative explanation for the findings.",
    "Autoimmune serology was unremarkable.",
    "Serum drug concentrations were within the usual therapeutic range.",
)
CASE_COURSE: Final = (
    "The patient was admitted for monitoring and supportive care.",
    "Intravenous fluids were started and electrolytes were monitored closely.",
    "A multidisciplinary team reviewed the case on the second day of admission.",
    "Supportive treatment was continued until the symptoms settled.",
    "The treating team considered rechallenge inappropriate given the severity of the reaction.",
    "Serial {test} showed gradual normalisation after withdrawal of {drug}.",
    "Over the following {weeks}, {his} condition improved steadily.",
    "{He} was discharged on day 12 with outpatient follow-up.",
    "{His} {indication} was subsequently managed with an alternative agent.",
    "At follow-up after {weeks}, {he} had fully recovered.",
    "{Drug} was not reintroduced.",
    "The event was reported to the national pharmacovigilance centre.",
)

DISCUSSION: Final = (
    "To our knowledge, this is one of few reported cases of {reaction} associated with {drug}.",
    "The temporal relationship between the start of {drug} and the onset of {reaction} "
    "supports a causal association.",
    "The Naranjo score was {score}, indicating a probable adverse drug reaction.",
    "Alternative causes, including {other}, were considered and excluded.",
    "The mechanism of {drug}-associated {reaction} may involve {mechanism}.",
    "Several risk factors may have contributed, including age and concomitant {comorbidity}.",
    "Previous reports describe a latency of one to eight weeks between exposure and onset.",
    "Prompt recognition and withdrawal of the suspected drug remain the mainstay of management.",
    "In most published cases, the reaction resolved after discontinuation.",
    "Rechallenge, although confirmatory, is rarely justified for serious reactions.",
    "Our patient had no features suggesting an infectious or autoimmune cause.",
    "Drug interactions were considered unlikely given the stable concomitant medication.",
    "Genetic predisposition may explain why only a minority of patients are affected.",
    "Clinicians should counsel patients about early symptoms that warrant medical attention.",
    "Routine laboratory monitoring may allow earlier detection of similar reactions.",
    "This case highlights the value of spontaneous reporting in pharmacovigilance.",
    "Limitations of this report include the lack of a drug rechallenge and of "
    "histological confirmation.",
    "The differential diagnosis initially included {other}, which was ruled out by "
    "further testing.",
    "Dose-dependent toxicity seems unlikely because the patient received a standard dose.",
    "Larger pharmacoepidemiological studies are needed to estimate the incidence of this reaction.",
    "Regulatory agencies have issued no specific warning regarding this association.",
    "The reaction developed despite therapeutic drug levels.",
    "Other members of the {drug_class} class have been associated with similar events.",
    "A high index of suspicion is needed when patients on {drug} present with new symptoms.",
)

LITERATURE: Final = (
    "{author} et al. ({journal_year}) described {a_age2}-year-old patient from {country} "
    "who developed {reaction} {onset2} days after starting {drug}.",
    "In a case from {country}, {author} and colleagues reported {reaction} in "
    "{a_age2}-year-old {sex2} treated with {drug} for {indication}.",
    "{author} et al. ({journal_year}) reported a similar case with onset after {onset2} "
    "days and complete recovery after withdrawal.",
    "A case series by {author} et al. included {count} patients with {reaction} during "
    "{drug} therapy, all of whom recovered.",
    "{author} et al. ({journal_year}) found {count} reports of {reaction} with {drug} in a "
    "national pharmacovigilance database.",
    "In the case described by {author} ({journal_year}), the reaction recurred on "
    "rechallenge with {drug}.",
)
LITERATURE_SLOTS: Final[dict[str, tuple[str, ...]]] = {
    "a_age2": tuple(f"an {a}" if a // 10 == 8 else f"a {a}" for a in range(19, 88, 3)),
    "onset2": tuple(str(d) for d in range(3, 60, 4)),
    "sex2": ("man", "woman"),
    "count": ("three", "four", "five", "seven", "nine", "twelve", "fifteen"),
}

CONCLUSION: Final = (
    "Clinicians should recognise {reactions} as possible adverse effects of {drug}.",
    "Early discontinuation of {drug} led to a favourable outcome in our patient.",
    "Clinicians prescribing {drug} for {indication} should be aware of this rare but "
    "serious reaction.",
    "Reporting of similar cases will help to clarify the risk.",
)
