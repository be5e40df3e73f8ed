"""Clinical scenarios for the MEDEC-shaped notes.

A :class:`Scenario` holds internally consistent findings, a correct diagnosis and correct
treatment for one condition, together with *wrong* alternatives that contradict the
findings (the injected medical errors). Fields with several strings are alternatives
chosen at random, which varies the wording of notes about the same condition.

``avoid`` names filler topics (see :data:`FILLER`) that would contradict the scenario,
e.g. a "lungs clear" sentence in a pneumonia note.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Scenario:
    """One condition with consistent findings and its possible errors.

    Attributes:
        name: short identifier.
        complaint: chief-complaint phrases ("fever and a productive cough").
        duration: how long symptoms lasted ("three days").
        history: history-of-present-illness sentences (pronoun slots ``{He}``/``{his}``).
        vitals: vital-sign sentences.
        exam: examination findings.
        results: laboratory or imaging results.
        diagnosis: the correct diagnosis phrase.
        wrong_diagnosis: diagnoses the findings contradict.
        treatment: correct regimen phrases ("amoxicillin 1 g orally three times daily").
        wrong_drug: regimens with an inappropriate drug.
        wrong_dose: regimens with the right drug at a dangerous or ineffective dose.
        management: correct next-step sentences.
        wrong_management: next steps inappropriate for the findings.
        organism: the causative organism, or ``None`` when not infectious.
        wrong_organism: organisms the results contradict.
        sex: ``"any"``, ``"female"`` or ``"male"``.
        ages: inclusive age range of patients.
        avoid: filler topics that must not appear in this note.
    """

    name: str
    complaint: tuple[str, ...]
    duration: tuple[str, ...]
    history: tuple[str, ...]
    vitals: tuple[str, ...]
    exam: tuple[str, ...]
    results: tuple[str, ...]
    diagnosis: str
    wrong_diagnosis: tuple[str, ...]
    treatment: tuple[str, ...]
    wrong_drug: tuple[str, ...]
    wrong_dose: tuple[str, ...]
    management: tuple[str, ...]
    wrong_management: tuple[str, ...]
    organism: str | None = None
    wrong_organism: tuple[str, ...] = ()
    sex: str = "any"
    ages: tuple[int, int] = (25, 80)
    avoid: frozenset[str] = frozenset()


SCENARIOS: Final[tuple[Scenario, ...]] = (
    Scenario(
        name="pneumonia",
        complaint=("fever and a productive cough", "cough with rust-coloured sputum and fever"),
        duration=("three days", "four days", "five days"),
        history=(
            "{He} reports shaking chills and right-sided pleuritic chest pain.",
            "{He} has been short of breath when climbing stairs since yesterday.",
            "{His} appetite has been poor and {he} feels progressively weaker.",
        ),
        vitals=(
            "Temperature is 38.9 C, heart rate 108/min, respiratory rate 24/min, and "
            "oxygen saturation 91% on room air.",
            "{He} is febrile to 39.2 C with a respiratory rate of 26/min and oxygen "
            "saturation of 92% on room air.",
        ),
        exam=(
            "Auscultation reveals crackles and bronchial breath sounds over the right lower lobe.",
            "There is dullness to percussion and increased tactile fremitus at the right base.",
        ),
        results=(
            "Chest x-ray shows a dense consolidation of the right lower lobe.",
            "Leukocyte count is 17,200/mm3 with 88% neutrophils.",
            "Sputum Gram stain shows gram-positive lancet-shaped diplococci.",
        ),
        diagnosis="community-acquired pneumonia of the right lower lobe",
        wrong_diagnosis=(
            "acute pancreatitis",
            "congestive heart failure exacerbation",
            "spontaneous pneumothorax",
        ),
        treatment=(
            "ceftriaxone 1 g intravenously daily plus azithromycin 500 mg daily",
            "amoxicillin 1 g orally three times daily for five days",
        ),
        wrong_drug=(
            "metoprolol 25 mg orally twice daily",
            "levothyroxine 50 mcg daily",
            "furosemide 40 mg intravenously",
        ),
        wrong_dose=(
            "ceftriaxone 10 g intravenously every hour",
            "amoxicillin 10 mg orally once weekly",
        ),
        management=(
            "{He} was admitted to the medical ward for intravenous antibiotics and oxygen therapy.",
        ),
        wrong_management=("{He} was discharged home without antibiotics and advised to rest.",),
        organism="Streptococcus pneumoniae",
        wrong_organism=("Clostridioides difficile", "Candida albicans", "Giardia lamblia"),
        avoid=frozenset({"lungs", "afebrile"}),
    ),
    Scenario(
        name="dka",
        complaint=("nausea, vomiting and abdominal pain", "excessive thirst and vomiting"),
        duration=("two days", "three days"),
        history=(
            "{He} has type 1 diabetes mellitus and ran out of insulin last week.",
            "{He} describes frequent urination and drinking several litres of water a day.",
            "{His} family noticed that {he} has become increasingly drowsy.",
        ),
        vitals=(
            "Heart rate is 122/min, blood pressure 98/60 mm Hg, and respirations are "
            "deep and rapid at 30/min.",
        ),
        exam=(
            "Mucous membranes are dry and there is a fruity odour on the breath.",
            "The abdomen is diffusely tender without rebound or guarding.",
        ),
        results=(
            "Serum glucose is 540 mg/dL, arterial pH is 7.12, and the anion gap is 26.",
            "Urinalysis is strongly positive for ketones and glucose.",
            "Serum bicarbonate is 9 mEq/L and beta-hydroxybutyrate is markedly elevated.",
        ),
        diagnosis="diabetic ketoacidosis",
        wrong_diagnosis=(
            "hyperosmolar hyperglycemic state without acidosis",
            "acute appendicitis",
            "alcohol withdrawal",
        ),
        treatment=(
            "aggressive isotonic saline and an intravenous regular insulin infusion "
            "at 0.1 units/kg/hour",
        ),
        wrong_drug=(
            "oral metformin 500 mg twice daily",
            "intravenous furosemide 40 mg",
            "oral glipizide 5 mg daily",
        ),
        wrong_dose=("an intravenous regular insulin bolus of 100 units/kg",),
        management=(
            "{He} was admitted to the intensive care unit with hourly glucose and "
            "electrolyte monitoring.",
        ),
        wrong_management=(
            "{He} was discharged home with instructions to restart insulin tomorrow.",
        ),
        ages=(16, 45),
        avoid=frozenset({"abdomen", "diabetes_free", "genitourinary", "pmh"}),
    ),
    Scenario(
        name="stemi",
        complaint=(
            "crushing substernal chest pain",
            "chest pressure radiating to the left arm",
        ),
        duration=("two hours", "ninety minutes", "one hour"),
        history=(
            "The pain began at rest and is associated with diaphoresis and nausea.",
            "{He} has a 30 pack-year smoking history and poorly controlled hypertension.",
            "Sublingual nitroglycerin given by paramedics did not relieve the pain.",
        ),
        vitals=(
            "Blood pressure is 148/92 mm Hg, heart rate 96/min, and oxygen saturation "
            "96% on room air.",
        ),
        exam=(
            "{He} appears pale and diaphoretic.",
            "Heart sounds are regular with an S4 gallop and no murmurs.",
        ),
        results=(
            "Electrocardiogram shows 3 mm ST-segment elevations in leads II, III, and aVF.",
            "High-sensitivity troponin is elevated at 1,850 ng/L.",
        ),
        diagnosis="acute inferior ST-elevation myocardial infarction",
        wrong_diagnosis=(
            "gastroesophageal reflux disease",
            "costochondritis",
            "panic attack",
        ),
        treatment=("aspirin 325 mg chewed, a heparin bolus, and ticagrelor 180 mg",),
        wrong_drug=("ibuprofen 800 mg orally", "oral omeprazole 20 mg alone"),
        wrong_dose=("aspirin 3,250 mg chewed", "a heparin bolus of 500,000 units"),
        management=(
            "The cardiac catheterization laboratory was activated for emergent "
            "percutaneous coronary intervention.",
        ),
        wrong_management=(
            "{He} was discharged home with an outpatient stress test in three months.",
        ),
        ages=(45, 85),
        avoid=frozenset({"heart", "smoking", "pmh"}),
    ),
    Scenario(
        name="hypothyroidism",
        complaint=("fatigue and weight gain", "cold intolerance and constipation"),
        duration=("four months", "six months", "several months"),
        history=(
            "{He} has gained 6 kg despite no change in diet.",
            "{He} reports dry skin, hair thinning, and feeling cold all the time.",
            "{His} mother has a history of autoimmune thyroid disease.",
        ),
        vitals=("Heart rate is 54/min and blood pressure is 128/86 mm Hg.",),
        exam=(
            "Deep tendon reflexes show a delayed relaxation phase.",
            "The thyroid gland is diffusely enlarged, firm, and nontender.",
        ),
        results=(
            "TSH is 18.4 mU/L and free thyroxine is low at 0.5 ng/dL.",
            "Anti-thyroid peroxidase antibodies are strongly positive.",
        ),
        diagnosis="primary hypothyroidism due to Hashimoto thyroiditis",
        wrong_diagnosis=(
            "Graves disease",
            "primary hyperparathyroidism",
            "major depressive disorder",
        ),
        treatment=("levothyroxine 50 mcg orally once daily", "levothyroxine 75 mcg daily"),
        wrong_drug=("methimazole 20 mg daily", "propylthiouracil 100 mg three times daily"),
        wrong_dose=("levothyroxine 5 mg orally once daily",),
        management=("TSH will be rechecked in six weeks to titrate the dose.",),
        wrong_management=("Total thyroidectomy was scheduled for next week.",),
        sex="female",
        ages=(30, 70),
        avoid=frozenset({"skin", "family"}),
    ),
    Scenario(
        name="cystitis",
        complaint=("burning on urination", "urinary frequency and urgency"),
        duration=("two days", "three days"),
        history=(
            "{He} reports suprapubic discomfort but no flank pain.",
            "{He} has had no vaginal discharge and is not pregnant.",
            "{He} had a similar episode two years ago.",
        ),
        vitals=("{He} is afebrile with a heart rate of 78/min and normal blood pressure.",),
        exam=("There is mild suprapubic tenderness without costovertebral angle tenderness.",),
        results=(
            "Urinalysis shows positive leukocyte esterase and nitrites with numerous "
            "white blood cells.",
            "Urine culture later grows more than 100,000 colonies of lactose-fermenting "
            "gram-negative rods.",
        ),
        diagnosis="acute uncomplicated cystitis",
        wrong_diagnosis=(
            "acute pyelonephritis with sepsis",
            "nephrolithiasis",
            "interstitial cystitis",
        ),
        treatment=("nitrofurantoin 100 mg orally twice daily for five days",),
        wrong_drug=("oral fluconazole 150 mg once", "oral acyclovir 400 mg three times daily"),
        wrong_dose=("nitrofurantoin 1,000 mg orally every two hours",),
        management=(
            "{He} was advised to maintain good hydration and return if fever or "
            "flank pain develops.",
        ),
        wrong_management=(
            "{He} was scheduled for an urgent cystoscopy under general anaesthesia.",
        ),
        organism="Escherichia coli",
        wrong_organism=("Mycobacterium tuberculosis", "Treponema pallidum"),
        sex="female",
        ages=(18, 55),
        avoid=frozenset({"genitourinary", "abdomen"}),
    ),
    Scenario(
        name="heart_failure",
        complaint=(
            "worsening shortness of breath and leg swelling",
            "breathlessness when lying flat",
        ),
        duration=("one week", "ten days"),
        history=(
            "{He} now sleeps on three pillows and wakes up gasping at night.",
            "{He} admits to eating salty take-away food most days recently.",
            "{He} has a history of ischemic cardiomyopathy with an ejection fraction of 30%.",
        ),
        vitals=(
            "Blood pressure is 152/94 mm Hg, heart rate 102/min, and oxygen saturation "
            "89% on room air.",
        ),
        exam=(
            "Jugular venous pressure is elevated to 12 cm with bibasilar crackles.",
            "There is 3+ pitting edema of both lower legs up to the knees.",
        ),
        results=(
            "BNP is 1,640 pg/mL.",
            "Chest x-ray shows cardiomegaly, vascular congestion, and small bilateral "
            "pleural effusions.",
        ),
        diagnosis="acute decompensated heart failure with reduced ejection fraction",
        wrong_diagnosis=(
            "community-acquired pneumonia",
            "acute asthma exacerbation",
            "hypovolemic shock",
        ),
        treatment=("intravenous furosemide 40 mg twice daily with daily weights",),
        wrong_drug=(
            "an intravenous normal saline bolus of 2 litres",
            "oral ibuprofen 600 mg three times daily",
        ),
        wrong_dose=("intravenous furosemide 4,000 mg twice daily",),
        management=(
            "Fluid restriction to 1.5 litres a day and strict intake and output "
            "monitoring were ordered.",
        ),
        wrong_management=("{He} was encouraged to drink at least four litres of fluid a day.",),
        ages=(55, 90),
        avoid=frozenset({"lungs", "extremities", "heart", "pmh", "sleep"}),
    ),
    Scenario(
        name="asthma",
        complaint=("wheezing and chest tightness", "shortness of breath and cough"),
        duration=("one day", "two days"),
        history=(
            "{He} has a history of asthma since childhood and a recent viral cold.",
            "{He} has used {his} albuterol inhaler every two hours without relief.",
            "Symptoms worsened after exposure to a neighbour's cat.",
        ),
        vitals=(
            "Respiratory rate is 28/min, heart rate 112/min, and oxygen saturation 93% "
            "on room air.",
        ),
        exam=(
            "There are diffuse expiratory wheezes with a prolonged expiratory phase.",
            "{He} speaks in short phrases and uses accessory muscles.",
        ),
        results=(
            "Peak expiratory flow is 52% of {his} personal best.",
            "Chest x-ray shows hyperinflation without consolidation.",
        ),
        diagnosis="moderate acute asthma exacerbation",
        wrong_diagnosis=(
            "pulmonary embolism",
            "acute myocardial infarction",
            "vocal cord paralysis",
        ),
        treatment=(
            "nebulized albuterol 2.5 mg every 20 minutes with ipratropium and oral "
            "prednisone 40 mg daily",
        ),
        wrong_drug=("oral propranolol 40 mg twice daily", "intravenous morphine 10 mg"),
        wrong_dose=("oral prednisone 4,000 mg daily",),
        management=("{He} will be reassessed after three nebulizer treatments.",),
        wrong_management=("All inhaled therapy was discontinued.",),
        ages=(12, 60),
        avoid=frozenset({"lungs", "pmh"}),
    ),
    Scenario(
        name="migraine",
        complaint=("a throbbing left-sided headache", "a pulsating headache with nausea"),
        duration=("eight hours", "one day"),
        history=(
            "The headache was preceded by flashing zigzag lines in {his} vision.",
            "{He} has had similar episodes about twice a month since adolescence.",
            "Light and noise make the pain worse, and {he} prefers a dark room.",
        ),
        vitals=("{He} is afebrile and blood pressure is 122/78 mm Hg.",),
        exam=(
            "Neurological examination is normal, with no neck stiffness.",
            "Fundoscopic examination shows sharp optic disc margins.",
        ),
        results=("No imaging was indicated given the typical features and normal examination.",),
        diagnosis="migraine with aura",
        wrong_diagnosis=(
            "bacterial meningitis",
            "subarachnoid hemorrhage",
            "temporal arteritis",
        ),
        treatment=("sumatriptan 50 mg orally with metoclopramide 10 mg",),
        wrong_drug=("intravenous alteplase", "oral warfarin 5 mg daily"),
        wrong_dose=("sumatriptan 500 mg orally every hour",),
        management=("A headache diary and lifestyle measures were discussed.",),
        wrong_management=(
            "An emergency lumbar puncture and empiric meningitis coverage were ordered.",
        ),
        sex="female",
        ages=(18, 50),
        avoid=frozenset({"neuro", "pmh"}),
    ),
    Scenario(
        name="gout",
        complaint=("a painful, swollen big toe", "sudden severe pain in the right first toe"),
        duration=("one day", "twelve hours"),
        history=(
            "The pain woke {him} from sleep after a dinner with red meat and beer.",
            "{He} takes hydrochlorothiazide for hypertension.",
            "Even the weight of the bed sheet on the toe is unbearable.",
        ),
        vitals=("Temperature is 37.6 C and blood pressure 146/90 mm Hg.",),
        exam=(
            "The right first metatarsophalangeal joint is red, hot, swollen, and exquisitely "
            "tender.",
        ),
        results=(
            "Joint aspirate shows needle-shaped negatively birefringent crystals.",
            "Serum uric acid is 9.4 mg/dL and the synovial fluid Gram stain is negative.",
        ),
        diagnosis="acute gouty arthritis",
        wrong_diagnosis=("septic arthritis", "rheumatoid arthritis", "pseudogout"),
        treatment=(
            "colchicine 1.2 mg followed by 0.6 mg one hour later",
            "naproxen 500 mg orally twice daily",
        ),
        wrong_drug=(
            "allopurinol 800 mg started during the acute flare",
            "intravenous vancomycin",
        ),
        wrong_dose=("colchicine 12 mg orally every hour",),
        management=("Hydrochlorothiazide will be replaced by losartan.",),
        wrong_management=("{He} was taken to the operating room for joint washout.",),
        sex="male",
        ages=(40, 80),
        avoid=frozenset({"extremities", "alcohol", "pmh"}),
    ),
    Scenario(
        name="iron_deficiency",
        complaint=("fatigue and shortness of breath on exertion", "tiredness and dizziness"),
        duration=("two months", "three months"),
        history=(
            "{He} reports heavy menstrual bleeding lasting eight days each cycle.",
            "{He} has been craving ice and feels cold.",
            "{He} follows a vegetarian diet.",
        ),
        vitals=("Heart rate is 98/min and blood pressure 108/70 mm Hg.",),
        exam=("The conjunctivae are pale and the nails are spoon-shaped.",),
        results=(
            "Hemoglobin is 8.6 g/dL with a mean corpuscular volume of 68 fL.",
            "Ferritin is 5 ng/mL and the red cell distribution width is increased.",
        ),
        diagnosis="iron deficiency anemia secondary to menorrhagia",
        wrong_diagnosis=(
            "vitamin B12 deficiency anemia",
            "hereditary spherocytosis",
            "anemia of chronic kidney disease",
        ),
        treatment=("ferrous sulfate 325 mg orally once daily",),
        wrong_drug=("intramuscular cyanocobalamin 1,000 mcg", "oral deferasirox 20 mg/kg"),
        wrong_dose=("ferrous sulfate 32.5 g orally once daily",),
        management=("A gynecology referral was placed to evaluate the menorrhagia.",),
        wrong_management=("{He} was referred for an urgent bone marrow transplant.",),
        sex="female",
        ages=(18, 48),
        avoid=frozenset({"eyes"}),
    ),
    Scenario(
        name="cellulitis",
        complaint=("a red, painful, swollen lower leg", "spreading redness of the left shin"),
        duration=("two days", "three days"),
        history=(
            "It started around a small cut {he} got while gardening.",
            "{He} reports subjective fevers and chills.",
            "The redness has spread despite elevating the leg.",
        ),
        vitals=("Temperature is 38.3 C and heart rate 96/min.",),
        exam=(
            "There is a warm, tender, poorly demarcated area of erythema over the left "
            "shin without fluctuance.",
        ),
        results=(
            "Leukocyte count is 13,400/mm3.",
            "Ultrasound shows no abscess and no deep vein thrombosis.",
        ),
        diagnosis="nonpurulent cellulitis of the left lower leg",
        wrong_diagnosis=("deep vein thrombosis", "contact dermatitis", "gout"),
        treatment=("cephalexin 500 mg orally four times daily for five days",),
        wrong_drug=("topical hydrocortisone cream alone", "oral fluconazole 150 mg"),
        wrong_dose=("cephalexin 5 mg orally once daily",),
        management=("The border of the erythema was marked to monitor progression.",),
        wrong_management=("Below-knee amputation was scheduled.",),
        organism="Streptococcus pyogenes",
        wrong_organism=("Candida albicans", "Plasmodium falciparum"),
        avoid=frozenset({"skin", "extremities", "afebrile"}),
    ),
    Scenario(
        name="appendicitis",
        complaint=(
            "abdominal pain that moved to the right lower quadrant",
            "right lower abdominal pain and vomiting",
        ),
        duration=("one day", "eighteen hours"),
        history=(
            "The pain began around the umbilicus before localizing to the right lower quadrant.",
            "{He} has lost {his} appetite and vomited twice.",
            "Walking and coughing make the pain worse.",
        ),
        vitals=("Temperature is 38.1 C and heart rate 104/min.",),
        exam=("There is tenderness at McBurney point with rebound and a positive psoas sign.",),
        results=(
            "Leukocyte count is 15,800/mm3 with a left shift.",
            "CT of the abdomen shows a dilated 12 mm appendix with periappendiceal fat stranding.",
        ),
        diagnosis="acute appendicitis",
        wrong_diagnosis=(
            "irritable bowel syndrome",
            "acute cholecystitis",
            "gastroenteritis",
        ),
        treatment=("intravenous cefoxitin 2 g before surgery",),
        wrong_drug=("oral bisacodyl 10 mg", "oral loperamide 4 mg"),
        wrong_dose=("intravenous cefoxitin 200 g before surgery",),
        management=("General surgery was consulted for laparoscopic appendectomy.",),
        wrong_management=("{He} was discharged with oral laxatives and a follow-up in one month.",),
        ages=(12, 45),
        avoid=frozenset({"abdomen", "afebrile"}),
    ),
    Scenario(
        name="pulmonary_embolism",
        complaint=(
            "sudden pleuritic chest pain and breathlessness",
            "acute shortness of breath",
        ),
        duration=("six hours", "one day"),
        history=(
            "{He} underwent a total knee replacement two weeks ago.",
            "{He} has noticed swelling of the right calf for several days.",
            "{He} coughed up a small amount of blood this morning.",
        ),
        vitals=(
            "Heart rate is 118/min, respiratory rate 26/min, and oxygen saturation 90% "
            "on room air.",
        ),
        exam=("The right calf is swollen and tender compared with the left.",),
        results=(
            "CT pulmonary angiography shows filling defects in the right lower lobe "
            "pulmonary arteries.",
            "D-dimer is markedly elevated.",
        ),
        diagnosis="acute pulmonary embolism",
        wrong_diagnosis=("acute pericarditis", "anxiety disorder", "costochondritis"),
        treatment=(
            "enoxaparin 1 mg/kg subcutaneously every 12 hours",
            "apixaban 10 mg twice daily for seven days, then 5 mg twice daily",
        ),
        wrong_drug=(
            "aspirin 81 mg daily as the only antithrombotic",
            "oral vitamin K 10 mg",
        ),
        wrong_dose=("enoxaparin 100 mg/kg subcutaneously every hour",),
        management=("{He} was admitted to a telemetry bed for anticoagulation and monitoring.",),
        wrong_management=("Anticoagulation was withheld and {he} was discharged with analgesics.",),
        ages=(30, 80),
        avoid=frozenset({"extremities", "pmh"}),
    ),
    Scenario(
        name="c_difficile",
        complaint=(
            "profuse watery diarrhea and cramping",
            "diarrhea and lower abdominal cramps",
        ),
        duration=("four days", "five days"),
        history=(
            "{He} completed a course of clindamycin for a dental infection last week.",
            "{He} has about ten watery bowel movements a day without blood.",
            "{He} feels lightheaded when standing up.",
        ),
        vitals=("Temperature is 38.2 C and heart rate 100/min.",),
        exam=("The abdomen is mildly distended with diffuse lower abdominal tenderness.",),
        results=(
            "Stool testing is positive for toxigenic Clostridioides difficile.",
            "Leukocyte count is 16,100/mm3 and creatinine is at baseline.",
        ),
        diagnosis="Clostridioides difficile colitis",
        wrong_diagnosis=("ulcerative colitis", "celiac disease", "irritable bowel syndrome"),
        treatment=(
            "oral vancomycin 125 mg four times daily for ten days",
            "oral fidaxomicin 200 mg twice daily for ten days",
        ),
        wrong_drug=("oral loperamide 4 mg after each stool", "intravenous vancomycin alone"),
        wrong_dose=("oral vancomycin 12.5 g four times daily",),
        management=("Contact precautions were instituted and clindamycin was avoided.",),
        wrong_management=("{He} was given another course of clindamycin.",),
        organism="Clostridioides difficile",
        wrong_organism=("Staphylococcus aureus", "Streptococcus pneumoniae"),
        avoid=frozenset({"abdomen", "afebrile"}),
    ),
    Scenario(
        name="anaphylaxis",
        complaint=("hives, lip swelling and wheezing", "difficulty breathing and a rash"),
        duration=("twenty minutes", "thirty minutes"),
        history=(
            "Symptoms began minutes after eating a cookie that contained peanuts.",
            "{He} has a known peanut allergy and did not have {his} auto-injector.",
            "{He} also reports nausea and a feeling of throat tightness.",
        ),
        vitals=(
            "Blood pressure is 78/46 mm Hg, heart rate 128/min, and oxygen saturation "
            "90% on room air.",
        ),
        exam=("There is diffuse urticaria, swelling of the lips, and bilateral wheezing.",),
        results=("Serum tryptase drawn on arrival is elevated.",),
        diagnosis="anaphylaxis due to peanut ingestion",
        wrong_diagnosis=("a panic attack", "vasovagal syncope", "contact dermatitis"),
        treatment=("intramuscular epinephrine 0.5 mg into the anterolateral thigh",),
        wrong_drug=("oral diphenhydramine as the only treatment", "oral amoxicillin 500 mg"),
        wrong_dose=("intravenous epinephrine 5 mg as a rapid bolus",),
        management=(
            "{He} will be observed for at least six hours and given an epinephrine "
            "auto-injector prescription.",
        ),
        wrong_management=("{He} was sent home immediately with no further observation.",),
        ages=(10, 60),
        avoid=frozenset({"skin", "lungs", "allergies"}),
    ),
    Scenario(
        name="strep_pharyngitis",
        complaint=("a severe sore throat and fever", "painful swallowing and fever"),
        duration=("two days", "three days"),
        history=(
            "{He} has no cough or runny nose.",
            "A classmate was recently diagnosed with strep throat.",
            "{He} has difficulty swallowing solids.",
        ),
        vitals=("Temperature is 38.8 C and heart rate 102/min.",),
        exam=(
            "The tonsils are enlarged with white exudates and there is tender anterior "
            "cervical lymphadenopathy.",
        ),
        results=("A rapid antigen detection test for group A streptococcus is positive.",),
        diagnosis="streptococcal pharyngitis",
        wrong_diagnosis=(
            "infectious mononucleosis",
            "allergic rhinitis",
            "peritonsillar abscess requiring drainage",
        ),
        treatment=(
            "amoxicillin 500 mg orally twice daily for ten days",
            "a single intramuscular dose of benzathine penicillin G 1.2 million units",
        ),
        wrong_drug=("oral acyclovir 800 mg five times daily", "oral fluconazole 200 mg"),
        wrong_dose=("amoxicillin 5 mg orally once daily for two days",),
        management=("{He} may return to school after 24 hours of antibiotics.",),
        wrong_management=("Emergency tonsillectomy was scheduled for tonight.",),
        organism="Streptococcus pyogenes",
        wrong_organism=("Epstein-Barr virus", "Candida albicans"),
        ages=(6, 30),
        avoid=frozenset({"afebrile", "ent", "nodes"}),
    ),
    Scenario(
        name="atrial_fibrillation",
        complaint=("palpitations and mild breathlessness", "an irregular, racing heartbeat"),
        duration=("two days", "three days"),
        history=(
            "{He} has hypertension and type 2 diabetes.",
            "{He} denies chest pain or syncope.",
            "{He} drinks several cups of coffee a day.",
        ),
        vitals=("Heart rate is irregularly irregular at 132/min and blood pressure 138/84 mm Hg.",),
        exam=("Heart sounds are irregularly irregular without murmurs.",),
        results=(
            "Electrocardiogram shows atrial fibrillation with a rapid ventricular "
            "response and no P waves.",
            "TSH is normal and the CHA2DS2-VASc score is 3.",
        ),
        diagnosis="atrial fibrillation with rapid ventricular response",
        wrong_diagnosis=(
            "sinus tachycardia",
            "acute myocardial infarction",
            "Wolff-Parkinson-White syndrome with a normal ECG",
        ),
        treatment=(
            "metoprolol 25 mg orally twice daily for rate control and apixaban 5 mg twice daily",
        ),
        wrong_drug=("amoxicillin 500 mg three times daily", "levothyroxine 100 mcg daily"),
        wrong_dose=("metoprolol 2,500 mg orally twice daily with apixaban 5 mg twice daily",),
        management=(
            "An echocardiogram was ordered to assess atrial size and ventricular function.",
        ),
        wrong_management=(
            "Anticoagulation was declined as unnecessary despite a CHA2DS2-VASc score of 3.",
        ),
        ages=(55, 90),
        avoid=frozenset({"heart", "diabetes_free", "pmh"}),
    ),
    Scenario(
        name="graves",
        complaint=("weight loss and palpitations", "tremor and heat intolerance"),
        duration=("two months", "three months"),
        history=(
            "{He} has lost 5 kg despite a good appetite.",
            "{He} feels anxious, sweats easily, and has frequent bowel movements.",
            "{His} family noticed that {his} eyes look more prominent.",
        ),
        vitals=("Heart rate is 112/min and blood pressure 142/68 mm Hg.",),
        exam=(
            "There is a fine tremor of the outstretched hands and bilateral proptosis.",
            "The thyroid is diffusely enlarged with an audible bruit.",
        ),
        results=(
            "TSH is suppressed below 0.01 mU/L and free thyroxine is elevated.",
            "Thyroid-stimulating immunoglobulins are positive.",
        ),
        diagnosis="Graves disease",
        wrong_diagnosis=("primary hypothyroidism", "pheochromocytoma", "anorexia nervosa"),
        treatment=("methimazole 10 mg orally daily and propranolol 20 mg three times daily",),
        wrong_drug=("levothyroxine 100 mcg daily", "oral prednisone 60 mg as monotherapy"),
        wrong_dose=("methimazole 1,000 mg orally daily",),
        management=("Thyroid function tests will be repeated in four to six weeks.",),
        wrong_management=("{He} was reassured that no treatment or follow-up is needed.",),
        ages=(20, 55),
        avoid=frozenset({"eyes", "neuro", "skin", "mood"}),
    ),
)

OPENING: Final = (
    "{a_age}-year-old {sex} presents to the {setting} with {duration} of {complaint}.",
    "{a_age}-year-old {sex} comes to the {setting} because of {complaint} for {duration}.",
    "{a_age}-year-old {sex} is evaluated in the {setting} for {complaint} that began "
    "{duration} ago.",
)
SETTINGS: Final = (
    "emergency department",
    "clinic",
    "urgent care center",
    "primary care office",
    "hospital",
)

DIAGNOSIS: Final = (
    "The presentation is most consistent with {dx}.",
    "The working diagnosis is {dx}.",
    "Taken together, these findings indicate {dx}.",
    "Assessment: {dx}.",
)
TREATMENT: Final = (
    "{He} was started on {rx}.",
    "Treatment was initiated with {rx}.",
    "The plan is to give {rx}.",
)
ORGANISM: Final = (
    "The most likely causative organism is {organism}.",
    "The infection is most likely caused by {organism}.",
)

FILLER: Final[dict[str, tuple[str, ...]]] = {
    # topic -> alternative sentences; a note uses at most one sentence per topic.
    # Scenarios name the topics that would contradict them in ``Scenario.avoid``.
    "social": (
        "{He} lives with {household} and {occupation}.",
        "{He} {occupation} and lives with {household}.",
        "At home {he} lives with {household}; {he} {occupation}.",
    ),
    "activity": (
        "{He} walks for about thirty minutes most days.",
        "{He} exercises twice a week at a local gym.",
        "{He} describes {his} usual activity level as moderate.",
        "{He} rides a bicycle to get around town.",
    ),
    "sleep": (
        "{He} reports sleeping six to seven hours a night.",
        "{He} usually sleeps well and wakes up rested.",
        "{His} sleep has been irregular because of a busy schedule.",
    ),
    "alcohol": (
        "{He} drinks alcohol occasionally on weekends.",
        "{He} drinks one or two glasses of wine a week.",
        "{He} does not drink alcohol.",
    ),
    "smoking": (
        "{He} has never smoked.",
        "{He} quit smoking ten years ago.",
        "{He} does not use tobacco or recreational drugs.",
    ),
    "family": (
        "Family history is notable for hypertension in {his} father.",
        "Family history is noncontributory.",
        "{His} mother had type 2 diabetes.",
        "There is no family history of early cardiac death.",
    ),
    "allergies": (
        "{He} has no known drug allergies.",
        "{He} reports a rash with sulfonamides in the past.",
        "{He} is allergic to latex.",
    ),
    "meds": (
        "{He} reports good adherence to {his} prescribed medications.",
        "{He} brought an up-to-date medication list to the visit.",
        "{His} medication list was reviewed and reconciled.",
    ),
    "immunization": (
        "{His} immunizations are up to date.",
        "{He} received an influenza vaccine this season.",
        "{His} tetanus vaccination was updated three years ago.",
    ),
    "pmh": (
        "Past medical history is otherwise unremarkable.",
        "{He} has had no prior hospitalizations.",
        "{He} has not had any surgery in the past.",
    ),
    "travel": (
        "{He} has not travelled outside the country recently.",
        "{He} returned from a family visit in a neighbouring city last month.",
    ),
    "mood": (
        "{He} denies feeling depressed or anxious.",
        "{His} mood has been stable.",
    ),
    "afebrile": ("{He} has had no fevers at home.", "{He} denies fevers or night sweats."),
    "genitourinary": (
        "{He} has no urinary symptoms.",
        "{He} denies dysuria or changes in urination.",
    ),
    "diabetes_free": ("{He} has no history of diabetes.",),
    "general": (
        "{He} is alert and oriented to person, place, and time.",
        "{He} appears uncomfortable but is able to give a clear history.",
        "{He} is cooperative throughout the examination.",
    ),
    "habitus": (
        "{He} is of average build.",
        "Body mass index is 27 kg/m2.",
        "{He} appears well nourished.",
    ),
    "heart": (
        "Heart sounds are regular with no murmurs, rubs, or gallops.",
        "S1 and S2 are normal without added sounds.",
    ),
    "lungs": (
        "The lungs are clear to auscultation bilaterally.",
        "Breath sounds are vesicular without wheezes or crackles.",
    ),
    "abdomen": (
        "The abdomen is soft and nontender with normal bowel sounds.",
        "There is no hepatosplenomegaly and the abdomen is nontender.",
    ),
    "extremities": (
        "There is no peripheral edema or calf tenderness.",
        "The extremities are warm and well perfused without edema.",
    ),
    "skin": (
        "The skin is warm and dry without rashes.",
        "There are no skin lesions or rashes.",
    ),
    "neuro": (
        "Cranial nerves are intact and strength is 5/5 in all extremities.",
        "Gait is normal and sensation is intact throughout.",
    ),
    "eyes": (
        "The conjunctivae are pink and the sclerae anicteric.",
        "Pupils are equal and reactive to light.",
    ),
    "ent": (
        "The oropharynx is clear without erythema.",
        "The tympanic membranes and oropharynx are unremarkable.",
    ),
    "nodes": ("There is no cervical or axillary lymphadenopathy.",),
    "followup": (
        "Follow-up is arranged with {his} primary care physician in {weeks}.",
        "A follow-up visit was booked for {weeks} from now.",
        "{He} will be seen again in {weeks} to review progress.",
    ),
    "precautions": (
        "Return precautions were reviewed and {he} verbalized understanding.",
        "{He} was counselled on the warning signs that should prompt an urgent return.",
    ),
    "discussion": (
        "The plan was discussed with {him} and {his} questions were answered.",
        "{He} agrees with the plan of care.",
        "Written instructions were provided to {him}.",
    ),
}
ADULT_SLOTS: Final[dict[str, tuple[str, ...]]] = {
    "household": (
        "{his} spouse",
        "two roommates",
        "{his} daughter",
        "a partner",
        "{his} elderly mother",
    ),
    "occupation": (
        "works as a teacher",
        "works as an accountant",
        "works as a bus driver",
        "works as a warehouse supervisor",
        "works as a software engineer",
        "works as a nurse",
        "works as a chef",
        "works as a carpenter",
    ),
    "weeks": ("one week", "two weeks", "ten days", "one month"),
}
RETIRED_OCCUPATION: Final = ("is retired", "is a retired teacher", "is a retired engineer")
MINOR_SLOTS: Final[dict[str, tuple[str, ...]]] = {
    "household": ("{his} parents", "{his} mother and two siblings", "{his} grandparents"),
    "occupation": (
        "attends middle school",
        "attends high school",
        "plays on a school football team",
    ),
    "weeks": ("one week", "two weeks", "ten days"),
}
MINOR_AVOID: Final = frozenset({"alcohol", "smoking"})
HISTORY_TOPICS: Final = (
    "social",
    "activity",
    "sleep",
    "alcohol",
    "smoking",
    "family",
    "allergies",
    "meds",
    "immunization",
    "pmh",
    "travel",
    "mood",
    "afebrile",
    "genitourinary",
    "diabetes_free",
)
EXAM_TOPICS: Final = (
    "general",
    "habitus",
    "heart",
    "lungs",
    "abdomen",
    "extremities",
    "skin",
    "neuro",
    "eyes",
    "ent",
    "nodes",
)
PLAN_TOPICS: Final = ("followup", "precautions", "discussion")
