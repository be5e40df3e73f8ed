"""Parties, neutral clause text and non-NDA documents for the ContractNLI-shaped contracts.

Nothing in this module may entail or contradict any of the 17 hypotheses: boilerplate
sections (remedies, governing law, notices, ...) and the non-NDA documents (equipment
leases, board minutes) are neutral with respect to every hypothesis. A neutral section is
``(title, sentences, nda_only)``; ``nda_only`` sections mention Confidential Information
and are used only in NDAs.
"""

from __future__ import annotations

from typing import Final

NAME_FIRST: Final = (
    "Brightwater",
    "Norland",
    "Cobalt",
    "Meridian",
    "Ashgrove",
    "Helix",
    "Silverline",
    "Redwood",
    "Quantum Harbor",
    "Northgate",
    "Bluestem",
    "Ironbridge",
    "Lakeshore",
    "Summit",
    "Crescent",
    "Evergreen",
    "Falcon",
    "Granite",
    "Harborview",
    "Juniper",
)
NAME_SECOND: Final = (
    "Analytics",
    "Biosystems",
    "Robotics",
    "Logistics",
    "Energy",
    "Materials",
    "Software",
    "Capital",
    "Health",
    "Devices",
    "Foods",
    "Semiconductors",
    "Networks",
    "Pharma",
    "Instruments",
)
JURISDICTIONS: Final = (
    # governing law, courts, form of a company organised there, name suffixes used there
    (
        "the State of Delaware",
        "Wilmington, Delaware",
        "a Delaware corporation",
        ("Inc.", "Corporation"),
    ),
    (
        "the State of New York",
        "New York County, New York",
        "a New York corporation",
        ("Inc.", "Corp."),
    ),
    (
        "the State of California",
        "San Francisco, California",
        "a California corporation",
        ("Inc.", "Corporation"),
    ),
    ("England and Wales", "London", "a company incorporated in England and Wales", ("Ltd.", "plc")),
    ("the Province of Ontario", "Toronto, Ontario", "an Ontario corporation", ("Inc.", "Ltd.")),
    (
        "the Republic of Singapore",
        "Singapore",
        "a company incorporated in Singapore",
        ("Pte. Ltd.",),
    ),
    ("the State of Texas", "Austin, Texas", "a Texas limited liability company", ("LLC",)),
)
STREETS: Final = (
    "Market Street",
    "Harbour Road",
    "Innovation Drive",
    "King Street West",
    "Park Avenue",
    "Science Park Way",
    "Station Road",
    "Main Street",
)
PRODUCTS: Final = (
    "battery management system",
    "diagnostic assay",
    "logistics platform",
    "industrial sensor",
    "payment gateway",
    "drug delivery device",
    "machine vision module",
    "food packaging film",
    "wind turbine controller",
    "clinical data pipeline",
)
PURPOSES: Final = (
    "evaluating a potential collaboration on the {product}",
    "assessing a possible supply agreement for the {product}",
    "discussing a potential acquisition of, or investment in, one of the parties",
    "exploring a joint development project relating to the {product}",
    "evaluating a possible license of technology relating to the {product}",
)
MONTHS: Final = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
NDA_TITLES: Final = (
    "Non-Disclosure Agreement",
    "Confidentiality Agreement",
    "Mutual Non-Disclosure Agreement",
    "Confidential Disclosure Agreement",
    "Nondisclosure and Confidentiality Agreement",
)

PREAMBLE: Final = (
    'This {title} (the "Agreement") is entered into as of {date} (the "Effective Date") '
    "by and between {discloser}, {discloser_form} with offices at {discloser_address} "
    '("Disclosing Party"), and {recipient}, {recipient_form} with offices at '
    '{recipient_address} ("Receiving Party").',
    "WHEREAS, the parties wish to engage in discussions for the purpose of {purpose}; and",
    "WHEREAS, in the course of those discussions Disclosing Party may make available to "
    "Receiving Party certain information that it regards as proprietary;",
    "NOW, THEREFORE, in consideration of the mutual covenants set out below, the parties "
    "agree as follows:",
)

# Neutral sentences of the sections that also hold hypothesis sentences.
CORE_NEUTRAL: Final[dict[str, tuple[str, ...]]] = {
    "definitions": (
        '"Purpose" means {purpose}.',
        '"Affiliate" means any entity that directly or indirectly controls, is controlled '
        "by, or is under common control with a party.",
        '"Confidential Information" means information relating to the Purpose that '
        "Disclosing Party makes available to Receiving Party, whether before or after the "
        "Effective Date.",
        '"Business Day" means a day other than a Saturday, Sunday or public holiday in {venue}.',
        '"Effective Date" means the date first written above.',
    ),
    "obligations": (
        "Receiving Party shall hold the Confidential Information in strict confidence and "
        "protect it with at least the degree of care it uses for its own information of a "
        "similar nature, and in no event less than reasonable care.",
        "Receiving Party shall promptly inform Disclosing Party of any unauthorized use or "
        "disclosure of Confidential Information of which it becomes aware.",
        "Receiving Party shall store Confidential Information in secure locations and "
        "systems protected against unauthorized access.",
    ),
    "exceptions": (
        "The obligations of this Agreement do not apply to information that is or becomes "
        "generally available to the public other than through a breach of this Agreement.",
        "The obligations of this Agreement do not apply to information that was lawfully "
        "known to Receiving Party before its disclosure under this Agreement.",
        "Receiving Party bears the burden of proving that any of these exceptions applies.",
    ),
    "compelled": (
        "Any disclosure required by law shall be limited to the portion of the Confidential "
        "Information that is legally required to be disclosed.",
    ),
    "ownership": (
        "All Confidential Information is and shall remain the property of Disclosing Party.",
        'Confidential Information is provided "as is", and Disclosing Party makes no '
        "warranty as to its accuracy or completeness.",
    ),
    "return": (),
    "solicitation": (),
    "term": (
        "This Agreement shall commence on the Effective Date and remain in force for "
        "{years} years unless terminated earlier in accordance with this Section.",
        "Either party may terminate this Agreement at any time upon {days} days' written "
        "notice to the other party.",
    ),
}
CORE_TITLES: Final[dict[str, str]] = {
    "definitions": "Definitions",
    "obligations": "Confidentiality Obligations",
    "exceptions": "Exceptions",
    "compelled": "Compelled Disclosure",
    "ownership": "Ownership of Information",
    "return": "Return of Materials",
    "solicitation": "Non-Solicitation",
    "term": "Term and Termination",
}
CORE_ORDER: Final = (
    "definitions",
    "obligations",
    "exceptions",
    "compelled",
    "ownership",
    "return",
    "solicitation",
    "term",
)
CORE_ALWAYS: Final = frozenset({"definitions", "obligations", "exceptions", "ownership", "term"})

BOILERPLATE: Final[tuple[tuple[str, tuple[str, ...], bool], ...]] = (
    (
        "Remedies",
        (
            "Receiving Party acknowledges that unauthorized disclosure of Confidential "
            "Information may cause Disclosing Party irreparable harm for which damages would "
            "not be an adequate remedy.",
            "Disclosing Party shall be entitled to seek injunctive relief, without posting "
            "bond, in addition to any other remedy available at law or in equity.",
            "The prevailing party in any action to enforce this Agreement shall be entitled to "
            "recover its reasonable legal fees and costs.",
            "The remedies in this Section are cumulative and not exclusive.",
        ),
        True,
    ),
    (
        "No Obligation to Proceed",
        (
            "Nothing in this Agreement obliges either party to enter into any further agreement "
            "or to proceed with any transaction.",
            "Each party reserves the right, in its sole discretion, to end the discussions at "
            "any time and for any reason.",
            "Unless and until a definitive agreement is signed, neither party shall have any "
            "legal obligation with respect to a transaction, except for the matters agreed "
            "here.",
        ),
        False,
    ),
    (
        "Governing Law and Jurisdiction",
        (
            "This Agreement shall be governed by and construed in accordance with the laws of "
            "{law}, without regard to its conflict of laws principles.",
            "The courts located in {venue} shall have exclusive jurisdiction over any dispute "
            "arising out of or relating to this Agreement.",
            "Each party irrevocably waives any objection to the venue of those courts.",
            "Each party waives, to the fullest extent permitted by law, any right to a trial "
            "by jury.",
        ),
        False,
    ),
    (
        "Notices",
        (
            "All notices under this Agreement shall be in writing and delivered by hand, by "
            "recognised courier or by email to the addresses set out above.",
            "A notice is deemed received on the next Business Day after it is sent.",
            "Either party may change its address for notices by giving notice to the other party.",
        ),
        False,
    ),
    (
        "Entire Agreement",
        (
            "This Agreement constitutes the entire agreement between the parties concerning its "
            "subject matter and supersedes all prior proposals and understandings.",
            "Each party acknowledges that it has not relied on any statement that is not set "
            "out in this Agreement.",
        ),
        False,
    ),
    (
        "Amendment and Waiver",
        (
            "No amendment of this Agreement is effective unless it is in writing and signed by "
            "authorized representatives of both parties.",
            "No failure or delay in exercising any right under this Agreement shall operate as "
            "a waiver of that right.",
            "A waiver of any breach shall not be deemed a waiver of any later breach.",
        ),
        False,
    ),
    (
        "Assignment",
        (
            "Neither party may assign or transfer this Agreement without the prior written "
            "consent of the other party, except to a successor of its entire business.",
            "This Agreement binds and benefits the parties and their permitted successors and "
            "assigns.",
            "Any purported assignment in breach of this Section is void.",
        ),
        False,
    ),
    (
        "Severability",
        (
            "If any provision of this Agreement is held invalid or unenforceable, the remaining "
            "provisions shall continue in full force and effect.",
            "The invalid provision shall be replaced by a valid provision that comes closest to "
            "the parties' original intention.",
        ),
        False,
    ),
    (
        "Counterparts and Electronic Signature",
        (
            "This Agreement may be executed in counterparts, each of which is an original and "
            "all of which together form one instrument.",
            "Signatures delivered by email in portable document format or through an "
            "electronic signature service are binding.",
        ),
        False,
    ),
    (
        "Export Control",
        (
            "Receiving Party shall comply with all applicable export control laws and "
            "regulations in relation to any technical data received under this Agreement.",
            "Receiving Party shall not export or re-export any such data to a destination "
            "prohibited by those laws.",
        ),
        True,
    ),
    (
        "Independent Parties",
        (
            "The parties are independent contractors, and nothing in this Agreement creates a "
            "partnership, joint venture, agency or employment relationship.",
            "Neither party has authority to bind the other party in any respect.",
        ),
        False,
    ),
    (
        "Data Protection",
        (
            "Each party shall comply with applicable data protection laws in performing this "
            "Agreement.",
            "Each party shall implement appropriate technical and organisational measures to "
            "protect any personal data it processes.",
        ),
        False,
    ),
    (
        "Costs",
        (
            "Each party shall bear its own costs and expenses in connection with the "
            "preparation, negotiation and performance of this Agreement.",
        ),
        False,
    ),
    (
        "Securities Laws",
        (
            "Receiving Party acknowledges that applicable securities laws may restrict persons "
            "in possession of material non-public information about a company from trading in "
            "its securities.",
            "Receiving Party shall comply with those laws.",
        ),
        True,
    ),
    (
        "Anti-Corruption",
        (
            "Each party shall comply with all applicable anti-bribery and anti-corruption laws "
            "in connection with this Agreement.",
            "Neither party shall offer or give anything of value to any official in order to "
            "obtain an improper advantage.",
        ),
        False,
    ),
    (
        "Third-Party Rights",
        (
            "A person who is not a party to this Agreement has no right to enforce any of its "
            "terms.",
        ),
        False,
    ),
    (
        "Interpretation",
        (
            "Headings are for convenience only and do not affect the interpretation of this "
            "Agreement.",
            'Words in the singular include the plural, and the word "including" means '
            '"including without limitation".',
            "References to a statute include that statute as amended or re-enacted.",
        ),
        False,
    ),
    (
        "Authority",
        (
            "Each party represents that it has full power and authority to enter into and "
            "perform this Agreement.",
            "The individuals signing below represent that they are duly authorized to sign on "
            "behalf of their respective parties.",
        ),
        False,
    ),
    (
        "Dispute Resolution",
        (
            "The parties shall first attempt in good faith to resolve any dispute through "
            "negotiation between senior executives for a period of {days} days.",
            "If the dispute is not resolved within that period, either party may commence "
            "proceedings in the courts named in this Agreement.",
            "Nothing in this Section prevents a party from seeking urgent interim relief.",
        ),
        False,
    ),
    (
        "Compliance with Laws",
        (
            "Each party shall comply with all laws and regulations applicable to its "
            "performance of this Agreement.",
            "Each party shall obtain and maintain any permits required for its activities "
            "under this Agreement.",
        ),
        False,
    ),
    (
        "Force Majeure",
        (
            "Neither party is liable for any delay or failure to perform caused by events beyond "
            "its reasonable control, including natural disasters, war and epidemics.",
            "The affected party shall notify the other party without undue delay and use "
            "reasonable efforts to mitigate the effect of the event.",
        ),
        False,
    ),
)

SIGNATURE: Final = (
    "IN WITNESS WHEREOF, the parties have caused this Agreement to be executed by their duly "
    "authorized representatives as of the Effective Date."
)

LEASE_TITLE: Final = (
    "Equipment Lease Agreement",
    "Master Equipment Lease",
    "Commercial Equipment Rental Agreement",
)
LEASE_PREAMBLE: Final = (
    'This {title} (the "Agreement") is made as of {date} between {discloser}, '
    '{discloser_form} with offices at {discloser_address} ("Lessor"), and {recipient}, '
    '{recipient_form} with offices at {recipient_address} ("Lessee").',
    "Lessor agrees to lease to Lessee, and Lessee agrees to lease from Lessor, the "
    "equipment described in Schedule A on the terms set out below.",
)
EQUIPMENT: Final = (
    "forklift trucks",
    "CNC milling machines",
    "refrigerated trailers",
    "laboratory centrifuges",
    "industrial printers",
    "server racks",
    "excavators",
    "medical imaging units",
)
LEASE_SECTIONS: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    (
        "Lease of Equipment",
        (
            'Lessor leases to Lessee the {equipment} listed in Schedule A (the "Equipment").',
            "Lessee shall use the Equipment only at its premises at {recipient_address}.",
            "Lessee shall not move the Equipment to another location without Lessor's prior "
            "written consent.",
        ),
    ),
    (
        "Term",
        (
            "The lease term begins on the delivery date and continues for {months} months.",
            "Lessee may extend the term for successive periods of twelve months by written "
            "notice given at least {days} days before expiry.",
        ),
    ),
    (
        "Rent and Payment",
        (
            "Lessee shall pay monthly rent of {amount} in advance on the first day of each month.",
            "Late payments bear interest at one and a half percent per month.",
            "Rent is payable without set-off or deduction of any kind.",
            "Lessor may adjust the rent once a year in line with the consumer price index.",
        ),
    ),
    (
        "Delivery and Installation",
        (
            "Lessor shall deliver the Equipment to Lessee's premises at Lessor's cost.",
            "Lessee shall provide suitable access, power and floor space for installation.",
            "Lessee shall inspect the Equipment within {days} days of delivery and notify "
            "Lessor of any defect.",
        ),
    ),
    (
        "Use and Maintenance",
        (
            "Lessee shall operate the Equipment in accordance with the manufacturer's "
            "instructions and only by trained personnel.",
            "Lessor shall carry out scheduled maintenance every {months} months.",
            "Lessee shall keep the Equipment in good working order, normal wear and tear excepted.",
            "Lessee shall not make alterations to the Equipment without Lessor's consent.",
        ),
    ),
    (
        "Insurance and Risk of Loss",
        (
            "Risk of loss of or damage to the Equipment passes to Lessee on delivery.",
            "Lessee shall insure the Equipment for its full replacement value and name Lessor "
            "as loss payee.",
            "Lessee shall provide certificates of insurance on request.",
        ),
    ),
    (
        "Title",
        (
            "The Equipment remains the property of Lessor at all times.",
            "Lessee shall keep the Equipment free of all liens and encumbrances.",
        ),
    ),
    (
        "Default",
        (
            "Lessee is in default if it fails to pay rent within {days} days of the due date "
            "or becomes insolvent.",
            "Upon default, Lessor may terminate this Agreement and repossess the Equipment.",
            "Lessee shall reimburse Lessor's reasonable costs of repossession.",
        ),
    ),
    (
        "Warranties",
        (
            "Lessor warrants that the Equipment will be in good working order on delivery.",
            "Lessor assigns to Lessee, for the term, any manufacturer warranties that may be "
            "assigned.",
            "Except as stated in this Section, the Equipment is leased without any other "
            "warranty, express or implied.",
        ),
    ),
    (
        "Limitation of Liability",
        (
            "Lessor shall not be liable for any indirect or consequential loss, including loss "
            "of profit or production.",
            "Lessor's total liability under this Agreement shall not exceed the rent paid in "
            "the preceding twelve months.",
            "Nothing in this Agreement limits liability for death or personal injury caused by "
            "negligence.",
        ),
    ),
    (
        "Indemnity",
        (
            "Lessee shall indemnify Lessor against all claims arising from the use, operation "
            "or possession of the Equipment during the term.",
            "Lessor shall give Lessee prompt notice of any claim for which it seeks indemnity.",
            "The indemnified party shall reasonably cooperate in the defence of any claim.",
        ),
    ),
    (
        "Taxes and Fees",
        (
            "Lessee shall pay all sales, use and property taxes relating to the Equipment.",
            "Registration and licensing fees for the Equipment are payable by Lessee.",
            "Lessor shall invoice any taxes it is required to collect together with the rent.",
        ),
    ),
    (
        "Inspection",
        (
            "Lessor may inspect the Equipment during normal business hours on reasonable notice.",
            "Lessee shall give Lessor's technicians safe access to the Equipment for inspection "
            "and repair.",
            "Lessor shall report the results of any inspection to Lessee in writing.",
        ),
    ),
    (
        "Subleasing",
        (
            "Lessee shall not sublease, lend or part with possession of the Equipment.",
            "Lessee may permit its contractors to operate the Equipment under Lessee's "
            "supervision.",
        ),
    ),
    (
        "Purchase Option",
        (
            "At the end of the term, Lessee may purchase the Equipment for its fair market value.",
            "Lessee shall exercise the option by written notice at least {days} days before "
            "the end of the term.",
            "Title passes to Lessee on receipt of the purchase price in full.",
        ),
    ),
    (
        "Security Deposit",
        (
            "Lessee shall pay a security deposit of {amount} on signature of this Agreement.",
            "Lessor may apply the deposit to any unpaid rent or repair costs.",
            "Any balance of the deposit shall be refunded within {days} days after the "
            "Equipment is surrendered.",
        ),
    ),
    (
        "Surrender of Equipment",
        (
            "At the end of the term, Lessee shall make the Equipment available for collection "
            "in the same condition as delivered, normal wear and tear excepted.",
            "Lessor shall collect the Equipment within {days} days of the end of the term.",
        ),
    ),
)

MINUTES_TITLE: Final = (
    "Minutes of the Meeting of the Board of Directors",
    "Minutes of the Quarterly Board Meeting",
    "Minutes of the Annual General Meeting",
)
MINUTES_PREAMBLE: Final = (
    "A meeting of the Board of Directors of {discloser} was held on {date} at the "
    "company's offices at {discloser_address}.",
    "The Chair, {chair}, called the meeting to order at {hour} and confirmed that a quorum "
    "was present.",
)
PEOPLE: Final = (
    "Maria Okafor",
    "James Lindqvist",
    "Priya Raman",
    "Tomas Ferreira",
    "Hannah Weiss",
    "Daniel Osei",
    "Yuki Tanaka",
    "Laura Bianchi",
    "Samuel Adeyemi",
    "Elena Petrova",
    "Marcus Hill",
    "Aisha Rahman",
)
MINUTES_SECTIONS: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    (
        "Attendance",
        (
            "Present were {person}, {person2} and {person3}, together with the Company Secretary.",
            "Apologies were received from {person4}.",
            "The Chief Financial Officer attended at the invitation of the Board.",
        ),
    ),
    (
        "Approval of Previous Minutes",
        (
            "The minutes of the previous meeting were approved as a true record.",
            "There were no matters arising that were not covered elsewhere on the agenda.",
        ),
    ),
    (
        "Chief Executive's Report",
        (
            "The Chief Executive reported that revenue for the quarter grew by {pct} percent "
            "compared with the same period last year.",
            "The Board discussed progress on the {product} and noted that the launch remains on "
            "schedule.",
            "The Chief Executive highlighted staffing shortages in the operations team.",
            "The Board asked management to present a hiring plan at the next meeting.",
        ),
    ),
    (
        "Financial Report",
        (
            "The Chief Financial Officer presented the management accounts for the quarter.",
            "Operating costs were {pct} percent below budget, mainly because of lower travel "
            "expenses.",
            "Cash at the end of the quarter stood at {amount}.",
            "The Board approved the revised budget for the coming financial year.",
        ),
    ),
    (
        "Facilities",
        (
            "The Board reviewed the proposal to expand the warehouse at {recipient_address}.",
            "After discussion, the Board approved capital expenditure of up to {amount} for "
            "the expansion.",
            "Management will obtain three competitive quotes before committing any funds.",
        ),
    ),
    (
        "Health and Safety",
        (
            "The Board noted that there were no reportable incidents during the quarter.",
            "Refresher safety training will be delivered to all site staff next month.",
            "The Board thanked the safety committee for its work.",
        ),
    ),
    (
        "Sustainability",
        (
            "The Board reviewed the company's energy consumption figures.",
            "Management proposed installing solar panels on the main building.",
            "The Board asked for a cost-benefit analysis before the next meeting.",
        ),
    ),
    (
        "Audit Committee Report",
        (
            "{person3} presented the report of the Audit Committee.",
            "The external auditors have confirmed their plan for the year-end audit.",
            "The committee reviewed internal controls over payments and found no material "
            "weaknesses.",
            "The Board approved the reappointment of the external auditors.",
        ),
    ),
    (
        "Remuneration Committee Report",
        (
            "The Remuneration Committee recommended a salary increase of {pct} percent for "
            "staff below senior management.",
            "The Board approved the recommendation.",
            "The committee will review the bonus framework before the end of the year.",
        ),
    ),
    (
        "Risk Review",
        (
            "The Board reviewed the risk register.",
            "Supply chain disruption remains the highest-rated risk for the company.",
            "Management has identified a second supplier for key components of the {product}.",
            "The Board asked for the register to be updated after the next supplier audit.",
        ),
    ),
    (
        "Customers and Markets",
        (
            "The Sales Director reported that the order book grew by {pct} percent during the "
            "quarter.",
            "Two large customers renewed their contracts on improved terms.",
            "The Board discussed the company's position in the export market.",
            "Management will present a pricing review at the next meeting.",
        ),
    ),
    (
        "Information Technology",
        (
            "The migration of the finance system to the new platform was completed in the quarter.",
            "The Board noted that staff training on the new system is ongoing.",
            "An external review of the company's network resilience is scheduled for next month.",
        ),
    ),
    (
        "Research and Development",
        (
            "The Head of Research reported on testing of the {product}.",
            "Laboratory results were in line with expectations.",
            "The Board approved additional funding of {amount} for the next phase of development.",
            "A progress report will be presented in six months.",
        ),
    ),
    (
        "People and Culture",
        (
            "Staff turnover for the quarter was {pct} percent, slightly below the previous "
            "quarter.",
            "The results of the staff survey showed improved satisfaction with training.",
            "The Board welcomed the launch of the mentoring programme.",
        ),
    ),
    (
        "Treasury",
        (
            "The Board reviewed the company's banking facilities.",
            "The revolving credit facility was renewed for a further three years.",
            "The Board authorized the Chief Financial Officer to sign the renewal documents.",
        ),
    ),
    (
        "Any Other Business",
        (
            "{person2} raised the date of the annual staff event, which will be confirmed by "
            "email.",
            "There being no other business, the Chair thanked the directors for their attendance.",
        ),
    ),
    (
        "Close of Meeting",
        (
            "The meeting closed at {hour2}.",
            "The next meeting will be held in {month}.",
        ),
    ),
)
MINUTES_FILLER: Final = (
    "{person} asked whether the figures had been compared with the industry average.",
    "Following discussion, the report was received and noted.",
    "{person2} requested that a written summary be circulated to all directors.",
    "The Board thanked management for the update.",
    "{person3} noted that the matter would be revisited at the next meeting.",
    "It was agreed that the Company Secretary would record the action in the action log.",
    "{person4} commented that the timeline appeared ambitious but achievable.",
    "The Chair summarised the discussion and confirmed the Board's support.",
    "Management answered questions from the directors on the assumptions used.",
    "The Board agreed to delegate the final decision to the Chief Executive.",
    "{person} suggested inviting an external adviser to a future meeting.",
    "No objections were raised.",
)
AMOUNTS: Final = (
    "$48,500",
    "$125,000",
    "$2.4 million",
    "EUR 310,000",
    "$7,900",
    "$560,000",
    "GBP 95,000",
)
PERCENTS: Final = ("three", "four", "six", "eight", "eleven", "twelve")
HOURS: Final = ("09:00", "10:30", "14:00", "15:15")
END_HOURS: Final = ("11:45", "12:30", "16:40", "17:10")
